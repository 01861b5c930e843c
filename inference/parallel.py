"""Independent pieces of work (MCMC chains) in forked worker processes, one torch thread each.

Forking, not spawning: the workers inherit the model and its data, so a model defined in a
script, a notebook or a test runs in them without being importable or picklable. Only the
results travel back (pickled). Inside a worker, work runs sequentially (no nested pools).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

import torch

from .backend import compile_in_this_process

T = TypeVar("T")
_task: Callable[[int], Any] | None = None
_in_worker = False


def cores() -> int:
    """Cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def fork_is_safe() -> bool:
    """Whether this process may fork: the platform has fork, and no JAX runtime has started here
    (a peer engine's; its thread pool does not survive a fork, and the child hangs)."""
    jax_runtime = sys.modules.get("jax._src.xla_bridge")
    live = bool(getattr(jax_runtime, "_backends", None))
    return "fork" in multiprocessing.get_all_start_methods() and not live


def can_fork() -> bool:
    return fork_is_safe() and not _in_worker


def may_fork_child() -> bool:
    """Whether :func:`in_child` forks: fork is safe here, and this is not a daemonic process
    (a Dask worker's, which may have no children)."""
    return fork_is_safe() and not multiprocessing.current_process().daemon


def _child(conn: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    # plain pickle: the Pipe's own pickler would pass tensors as shared memory, which dies
    # with this process
    try:
        conn.send_bytes(pickle.dumps((True, fn(*args))))
    except BaseException as e:  # the parent raises it again
        try:
            conn.send_bytes(pickle.dumps((False, e)))
        except Exception:  # an exception that does not pickle
            conn.send_bytes(pickle.dumps((False, RuntimeError(f"{type(e).__name__}: {e}"))))
    finally:
        conn.close()
    # gone at once, with the worker processes a library left behind (PyStan's executor): at
    # a normal exit this process would wait on them, and they on it
    for worker in multiprocessing.active_children():
        worker.terminate()
        worker.join(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def in_child(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a process forked for it, its result (or its exception) sent back
    pickled; in this process where :func:`may_fork_child` says no. What ``fn`` leaves behind
    in its process (a runtime's threads, caches) does not reach this one."""
    if not may_fork_child():
        return fn(*args)
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(send, fn, args))
    child.start()
    send.close()
    try:
        ok, value = pickle.loads(recv.recv_bytes())
    except EOFError:
        child.join()
        raise ChildProcessError(
            f"the process forked for {getattr(fn, '__name__', fn)} died without a result "
            f"(exit code {child.exitcode})"
        ) from None
    child.join()
    if not ok:
        raise value
    return value


def _init_worker() -> None:
    global _in_worker
    if not _in_worker:
        # what the worker inherited (modules, the registry: a third of a million objects) lives
        # as long as it does: out of the garbage collector's sight, its full passes take half
        # the time. Once a process (a Dask worker calls this before each task): frozen later,
        # a finished task's garbage would never be collected
        gc.freeze()
    _in_worker = True
    torch.set_num_threads(1)
    compile_in_this_process()


def _call(i: int) -> Any:
    assert _task is not None
    return _task(i)


def map_indices(fn: Callable[[int], T], n: int, workers: int) -> list[T]:
    """``[fn(0), ..., fn(n - 1)]``, on up to ``workers`` forked processes when there is more than
    one item, more than one worker and fork is available; in this process otherwise."""
    global _task
    workers = min(workers, n)
    if workers <= 1 or not can_fork():
        return [fn(i) for i in range(n)]
    _task = fn
    try:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker) as pool:
            return list(pool.map(_call, range(n)))
    finally:
        _task = None


def mark_worker() -> None:
    """Called in a worker process of an outer pool (the report's cells): no nested pools."""
    _init_worker()
