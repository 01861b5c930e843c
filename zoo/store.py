"""The cell store: every finished cell of a report on disk, so a report run again resumes.

A cell (model x engine x seed, with its options) is stored under the report's folder as
``cells/<model>/<engine>-seed<seed>.nc`` (the Run's InferenceData, netCDF) and
``cells/<model>/<engine>-seed<seed>.json.gz`` (everything else: summary, diagnostics, traces,
evidence, status, warnings, extras; arrays exactly, as base64 of their bytes; gzipped: a
model with thousands of latents has a summary row for each). Each file is
written atomically (a hidden temporary file, then ``os.replace``), the netCDF first; the JSON
holds the netCDF's SHA-256, so a netCDF cut short or left from another run does not pass.

The JSON also holds the cell's key, a SHA-256 of what decides its result:

- the model name, the engine, the seed and the engine options (as run);
- the model's data (a hash of ``entry.load_data()``: every tensor's dtype, shape and bytes);
- the code version: the versions of pyro-zoo, Python, torch, Pyro, NumPy and ArviZ, a hash of
  the source of the ``zoo`` and ``zoo_inference`` packages (every ``.py`` file: models, engines and
  the runner; an edit anywhere recomputes every cell, so no stale result survives a change of
  code), and a hash of the model's own module file when it lies outside them (a model
  registered from another package or a script). The setting ``code_version``
  (``zoo.configure(code_version=...)``, or the environment variable ``ZOO_CODE_VERSION``), when
  set, stands in for the hash of the packages' source: to keep a long sweep's cells across an
  edit known to change no result (a comment, a docstring), at the user's own risk.

A stored cell is used only when its key matches, its files are whole and they decode; otherwise
it is recomputed, and a cell found corrupt or stale says so in a log line (logger
``zoo.store``). A failed cell (a Run with ``status == "failed"``) is stored, so the reason is on
disk, but recomputed on the next run: a failure may be passing (a killed worker, memory).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import gzip
import hashlib
import inspect
import io
import json
import logging
import math
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, fields
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

import zoo_inference
from zoo_inference import Run
from zoo_inference.arviz_io import arviz
from zoo_inference.config import config
from zoo_inference.results import Evidence, one_line
from zoo_reports.findings import STORED_KEY
from zoo_reports.loo import LOO_KEY, pointwise_loo

from .files import TMP_SUFFIX, remove_leftovers, replace_file, replacing
from .registry import get_model

log = logging.getLogger("zoo.store")

FORMAT = 1  # of the JSON record; another format is recomputed
STORE_DIR = "cells"
# the packages whose source a result depends on, by their folders (as installed or as checked out)
SOURCE_PACKAGES = {
    "zoo": Path(__file__).resolve().parent,
    "zoo_inference": Path(zoo_inference.__file__).resolve().parent,
}
_LIBRARIES = ("pyro-zoo", "torch", "pyro-ppl", "numpy", "arviz")
# the Run fields the JSON holds (data is the model's, restored from the registry; idata: netCDF)
_RUN_FIELDS = tuple(f.name for f in fields(Run) if f.name not in ("data", "idata", "evidence"))


class Unstorable(TypeError):
    """A value the store cannot write exactly."""


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """SHA-256 of the source of the ``zoo`` and ``inference`` packages (every ``.py`` file, by
    its path and bytes)."""
    h = hashlib.sha256()
    for pkg, folder in SOURCE_PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            h.update(f"{pkg}/{path.relative_to(folder).as_posix()}".encode() + b"\0")
            h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


@functools.cache
def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def code_version(model: Any = None) -> dict[str, str]:
    """The code a cell's result depends on: library versions, :func:`source_hash`, and, for a
    model defined outside the zoo's packages, a hash of its module's file (or of the model's own
    source where it has no file, as in a notebook)."""
    out = {d: _version(d) for d in _LIBRARIES}
    out["python"] = platform.python_version()
    out["source"] = config().code_version or source_hash()
    if model is not None:
        own = _model_source(model)
        if own is not None:
            out["model_source"] = hashlib.sha256(own).hexdigest()
    return out


def _model_source(model: Any) -> bytes | None:
    """The source of the module defining ``model`` when outside the zoo's packages."""
    try:
        name = inspect.getsourcefile(model)
    except TypeError:  # a builtin or a callable object: nothing to hash
        return None
    path = Path(name).resolve() if name else None
    if path is not None and any(path.is_relative_to(p) for p in SOURCE_PACKAGES.values()):
        return None
    if path is not None and path.is_file():
        return path.read_bytes()
    try:
        return inspect.getsource(model).encode()
    except (OSError, TypeError):
        return None


def fingerprint(obj: Any) -> str:
    """SHA-256 of a value's exact encoding (tensors and arrays by dtype, shape and bytes); a
    value the store cannot encode by its ``repr``."""
    text = json.dumps(encode(obj, strict=False), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# ---- exact JSON of results --------------------------------------------------------------------


def _array(a: np.ndarray) -> dict[str, Any]:
    if a.dtype.kind in "biufcUS":
        return {
            "__ndarray__": base64.b64encode(a.tobytes(order="C")).decode(),
            "dtype": a.dtype.str,
            "shape": list(a.shape),
        }
    if a.dtype.kind == "O":
        return {"__objarray__": [encode(x) for x in a.ravel().tolist()], "shape": list(a.shape)}
    raise Unstorable(f"array of dtype {a.dtype}")


def encode(obj: Any, *, strict: bool = True) -> Any:
    """JSON data from which :func:`decode` rebuilds ``obj`` exactly: numbers, strings, lists,
    tuples, dicts, NumPy arrays and scalars, torch tensors, pandas frames and series. Anything
    else raises :class:`Unstorable` (``strict=False``: its ``repr``, for hashing only)."""
    if obj is None or isinstance(obj, bool | str):
        return obj
    if isinstance(obj, np.generic):
        return {"__scalar__": _array(np.asarray(obj))}
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else {"__float__": repr(obj)}
    if isinstance(obj, list):
        return [encode(v, strict=strict) for v in obj]
    if isinstance(obj, tuple):
        return {"__tuple__": [encode(v, strict=strict) for v in obj]}
    if isinstance(obj, np.ndarray):
        return _array(obj)
    if isinstance(obj, torch.Tensor):
        try:
            arr = obj.detach().cpu().numpy()
        except TypeError as e:  # bfloat16 and other dtypes NumPy lacks
            if not strict:
                return {"__repr__": repr(obj)}
            raise Unstorable(str(e)) from None
        return {"__tensor__": _array(arr)}
    if isinstance(obj, pd.DataFrame):
        return {
            "__frame__": {
                "columns": encode(list(obj.columns), strict=strict),
                "index": encode(list(obj.index), strict=strict),
                "index_name": encode(obj.index.name, strict=strict),
                "values": [_array(obj.iloc[:, i].to_numpy()) for i in range(obj.shape[1])],
            }
        }
    if isinstance(obj, pd.Series):
        return {
            "__series__": {
                "index": encode(list(obj.index), strict=strict),
                "name": encode(obj.name, strict=strict),
                "values": _array(obj.to_numpy()),
            }
        }
    if isinstance(obj, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in obj):
            return {k: encode(v, strict=strict) for k, v in obj.items()}
        return {
            "__dict__": [
                [encode(k, strict=strict), encode(v, strict=strict)] for k, v in obj.items()
            ]
        }
    if not strict:
        return {"__repr__": repr(obj)}
    raise Unstorable(type(obj).__name__)


def _unarray(d: Mapping[str, Any]) -> np.ndarray:
    if "__objarray__" in d:
        out = np.empty(len(d["__objarray__"]), dtype=object)
        out[:] = [decode(x) for x in d["__objarray__"]]
        return out.reshape(tuple(d["shape"]))
    raw = base64.b64decode(d["__ndarray__"], validate=True)
    return np.frombuffer(raw, dtype=np.dtype(d["dtype"])).reshape(tuple(d["shape"])).copy()


def decode(obj: Any) -> Any:
    """The value :func:`encode` encoded."""
    if isinstance(obj, list):
        return [decode(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__float__" in obj:
        return float(obj["__float__"])
    if "__tuple__" in obj:
        return tuple(decode(v) for v in obj["__tuple__"])
    if "__dict__" in obj:
        return {decode(k): decode(v) for k, v in obj["__dict__"]}
    if "__ndarray__" in obj or "__objarray__" in obj:
        return _unarray(obj)
    if "__scalar__" in obj:
        return _unarray(obj["__scalar__"])[()]
    if "__tensor__" in obj:
        return torch.from_numpy(_unarray(obj["__tensor__"]))
    if "__frame__" in obj:
        f = obj["__frame__"]
        columns = [_unarray(v) for v in f["values"]]
        frame = pd.DataFrame(dict(enumerate(columns)), index=pd.RangeIndex(len(decode(f["index"]))))
        frame.columns = pd.Index(decode(f["columns"]))
        frame.index = pd.Index(decode(f["index"]), name=decode(f["index_name"]))
        return frame
    if "__series__" in obj:
        s = obj["__series__"]
        return pd.Series(
            _unarray(s["values"]), index=pd.Index(decode(s["index"])), name=decode(s["name"])
        )
    return {k: decode(v) for k, v in obj.items()}


def _encode_lenient(obj: Mapping[str, Any], where: str, dropped: list[str]) -> dict[str, Any]:
    """``encode`` of a dict, leaving out (and naming in ``dropped``) the entries it cannot
    store: a torch distribution, a fitted scikit-learn object."""
    out: dict[str, Any] = {}
    for k, v in obj.items():
        try:
            if isinstance(v, dict) and all(isinstance(x, str) and x[:2] != "__" for x in v):
                out[k] = _encode_lenient(v, f"{where}.{k}", dropped)
            else:
                out[k] = encode(v)
        except Unstorable as e:
            dropped.append(f"{where}.{k} ({e})")
    return out


def run_to_json(run: Run) -> tuple[dict[str, Any], list[str]]:
    """A Run without its InferenceData (and data) as exact JSON, and the extras left out."""
    dropped: list[str] = []
    out = {name: encode(getattr(run, name)) for name in _RUN_FIELDS if name != "extras"}
    out["extras"] = _encode_lenient(run.extras, "extras", dropped)
    ev = run.evidence
    out["evidence"] = (
        None
        if ev is None
        else encode({"value": ev.value, "kind": ev.kind, "conditional_on": ev.conditional_on})
    )
    return out, dropped


def run_from_json(record: Mapping[str, Any], idata: Any, data: dict[str, Any]) -> Run:
    """The Run :func:`run_to_json` wrote, with its InferenceData and the model's data."""
    values = {name: decode(record[name]) for name in _RUN_FIELDS}
    ev = decode(record["evidence"])
    evidence = (
        None if ev is None else Evidence(ev["value"], ev["kind"], tuple(ev["conditional_on"]))
    )
    return Run(**values, evidence=evidence, idata=idata, data=data)


# ---- the store ---------------------------------------------------------------------------------


class Unusable(ValueError):
    """Why a stored cell cannot be used; ``kind``: ``corrupt`` (its files are damaged),
    ``stale`` (its key changed) or ``failed`` (it failed last time)."""

    def __init__(self, why: str, kind: str = "corrupt") -> None:
        super().__init__(why)
        self.kind = kind


MAX_STORED_DRAWS = 2000  # posterior draws a report keeps of a run (every chain thinned evenly)
MAX_STORED_BYTES = 4_000_000  # ... and at most this much of them (a VAE's 15,000 local latents)


def stored_form(run: Run) -> Run:
    """The run as a report keeps it, in a worker's reply and in its cell: its pointwise LOO in
    ``extras`` (:func:`zoo_reports.loo.pointwise_loo`) in place of the ``log_likelihood`` group
    (draws x observations, most of a cell's size), and
    at most :data:`MAX_STORED_DRAWS` posterior draws and :data:`MAX_STORED_BYTES` of them (every
    k-th draw of each chain, ``sample_stats`` alike). Its summary and diagnostics, computed
    from every draw, stay as they are; ``extras[STORED_KEY]`` says what was thinned."""
    idata = run.idata
    if idata is None:
        return run
    extras = dict(run.extras)
    groups = {g: idata[g] for g in idata.groups()}
    if "log_likelihood" in groups:
        extras[LOO_KEY] = pointwise_loo(run)
        del groups["log_likelihood"]
    post = groups.get("posterior")
    if post is not None and "draw" in post.dims:
        draws = post.sizes.get("chain", 1) * post.sizes["draw"]
        size = sum(v.nbytes for v in post.data_vars.values())
        every = max(-(-draws // MAX_STORED_DRAWS), -(-size // MAX_STORED_BYTES), 1)
        if every > 1:
            for g in ("posterior", "sample_stats"):
                if g in groups and "draw" in groups[g].dims:
                    groups[g] = groups[g].isel(draw=slice(None, None, every))
            extras[STORED_KEY] = {"draws": int(draws), "every": int(every)}
    if extras == run.extras:
        return run
    return dataclasses.replace(run, idata=arviz().InferenceData(**groups), extras=extras)


@dataclass
class Found:
    """What :meth:`CellStore.load` found: the stored Run, or None and why not (``why`` and
    ``kind`` as :class:`Unusable`'s; both None when nothing was stored)."""

    run: Run | None
    why: str | None = None
    kind: str | None = None


class CellStore:
    """The cells of one report folder's sweeps (``out/cells``): :meth:`load` what a previous run
    finished, :meth:`save` what this one finishes. ``reuse=False`` (``zoo report --fresh``)
    reads nothing, recomputes every cell and overwrites what it stored."""

    def __init__(self, out: str | os.PathLike[str], *, reuse: bool = True) -> None:
        self.root = Path(out) / STORE_DIR
        self.reuse = reuse
        self._data: dict[str, tuple[dict[str, Any], str]] = {}

    def __repr__(self) -> str:
        return f"CellStore({str(self.root)!r}, reuse={self.reuse})"

    def clean(self) -> list[Path]:
        """Remove temporary files a killed writer left (call it holding the folder's lock)."""
        return remove_leftovers(self.root, f"*/.*{TMP_SUFFIX}") if self.root.is_dir() else []

    def paths(self, model: str, engine: str, seed: int) -> tuple[Path, Path]:
        """The cell's JSON record and netCDF."""
        base = self.root / model / f"{engine}-seed{seed}"
        return base.parent / f"{base.name}.json.gz", base.with_suffix(".nc")

    def data(self, model: str) -> tuple[dict[str, Any], str]:
        """The model's default data and its fingerprint (computed once per store)."""
        if model not in self._data:
            data = get_model(model).load_data()
            self._data[model] = (data, fingerprint(data))
        return self._data[model]

    def key_parts(self, model: str, engine: str, seed: int, options: Mapping[str, Any]) -> dict:
        """What decides a cell's result (see the module's doc)."""
        return {
            "model": model,
            "engine": engine,
            "seed": seed,
            "options": fingerprint(dict(options)),
            "data": self.data(model)[1],
            "code": code_version(get_model(model).model),
        }

    def load(self, model: str, engine: str, seed: int, options: Mapping[str, Any]) -> Found:
        """The stored Run of this cell if it is whole and current; else why not."""
        if not self.reuse:
            return Found(None)
        record_path, nc_path = self.paths(model, engine, seed)
        if not record_path.exists():
            return Found(None)
        parts = self.key_parts(model, engine, seed, options)
        try:
            return Found(self._read(record_path, nc_path, parts))
        except Unusable as e:
            return Found(None, str(e), e.kind)

    def _read(self, record_path: Path, nc_path: Path, parts: Mapping[str, Any]) -> Run:
        try:
            record = read_record(record_path)
        except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise Unusable(f"unreadable JSON ({type(e).__name__}: {e})") from None
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise Unusable(f"not a cell record of format {FORMAT}")
        stored = record.get("key_parts") or {}
        if record.get("key") != _key(stored):
            raise Unusable("its key does not match its key parts")
        if record["key"] != _key(parts):
            changed = [k for k in parts if stored.get(k) != parts[k]] or ["key"]
            raise Unusable(f"stale: {', '.join(changed)} changed", "stale")
        if record.get("status") == "failed":
            raise Unusable(f"it failed last time ({record.get('error')})", "failed")
        idata = None
        nc = record.get("netcdf")
        if nc is not None:
            try:
                raw = nc_path.read_bytes()
            except OSError as e:
                raise Unusable(f"its netCDF is missing ({e.strerror or e})") from None
            if hashlib.sha256(raw).hexdigest() != nc.get("sha256"):
                raise Unusable("its netCDF does not match its record (cut short or replaced)")
            idata = _read_netcdf(raw)
        try:
            return run_from_json(record["run"], idata, self.data(parts["model"])[0])
        except Exception as e:  # noqa: BLE001 - any malformed field: recompute the cell
            raise Unusable(f"undecodable record ({type(e).__name__}: {e})") from None

    def save(
        self, model: str, engine: str, seed: int, options: Mapping[str, Any], run: Run
    ) -> bool:
        """Store a finished cell (netCDF first, then the record that vouches for it); False, with
        a log line, when its results cannot be stored (it will be recomputed next time)."""
        record_path, nc_path = self.paths(model, engine, seed)
        parts = self.key_parts(model, engine, seed, options)
        try:
            payload, dropped = run_to_json(run)
        except Unstorable as e:
            log.warning(
                "cell %s/%s: not stored (cannot store %s); it runs again next time",
                model,
                engine,
                e,
            )
            return False
        nc = None
        if run.idata is not None:
            try:  # an unwritable idata (or a full disk): the report goes on without this cell
                with replacing(nc_path) as tmp:
                    # netCDF4's C library: the quick report's 187 cells in 11.3 s, h5netcdf's
                    # 22.4 (on the report's main process while the workers run); h5netcdf
                    # reads the file (netCDF-4 is HDF5)
                    run.idata.to_netcdf(str(tmp), engine="netcdf4")
                    nc = {"file": nc_path.name, "sha256": _sha256(tmp)}
            except Exception as e:  # noqa: BLE001
                log.warning(
                    "cell %s/%s: not stored (its InferenceData cannot be written as netCDF: %s); "
                    "it runs again next time",
                    model,
                    engine,
                    one_line(e),
                )
                return False
        else:
            nc_path.unlink(missing_ok=True)
        record = {
            "format": FORMAT,
            "key": _key(parts),
            "key_parts": parts,
            "model": model,
            "engine": engine,
            "seed": seed,
            "status": run.status,
            "error": run.error,
            "wall_time_s": encode(run.diagnostics.get("wall_time_s")),
            "netcdf": nc,
            "dropped": dropped,
            "run": payload,
        }
        text = json.dumps(record, indent=1, allow_nan=False, ensure_ascii=False) + "\n"
        try:
            replace_file(record_path, gzip.compress(text.encode("utf-8"), mtime=0))
        except OSError as e:
            log.warning("cell %s/%s: not stored (%s); it runs again next time", model, engine, e)
            return False
        return True


def read_record(path: Path) -> Any:
    """A cell's JSON record, from its gzipped file (``zcat`` shows it)."""
    return json.loads(gzip.decompress(path.read_bytes()).decode("utf-8"))


def _key(parts: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read_netcdf(raw: bytes) -> Any:
    """An InferenceData from netCDF bytes, loaded into memory (no file left open)."""
    az = arviz()
    try:
        with az.rc_context({"data.load": "eager"}):
            return az.from_netcdf(io.BytesIO(raw))
    except Exception as e:  # noqa: BLE001 - a file h5netcdf cannot read
        raise Unusable(f"unreadable netCDF ({one_line(e)})") from None
