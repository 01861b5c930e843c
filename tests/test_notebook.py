"""The notebook display in a real Jupyter kernel (nbclient): a Run, a Comparison and a model
entry show as HTML; re-running a registering cell with replace=True works; progress shows."""

from __future__ import annotations

import importlib.util

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
# found, not imported: an imported ipykernel makes zoo think a notebook is watching, and every
# later test in this worker process would draw progress bars into its captured stderr
if importlib.util.find_spec("ipykernel") is None:
    pytest.skip("ipykernel is not installed", allow_module_level=True)

CELLS = [
    "import zoo\nrun = zoo.run('beta_bernoulli', 'exact', num_samples=200)\nrun",
    "zoo.compare('beta_bernoulli', ['exact'], num_samples=200)",
    "zoo.get_model('three_coin')",
    "import pyro, pyro.distributions as dist, torch\n"
    "def m(y):\n"
    "    mu = pyro.sample('mu', dist.Normal(0.0, 1.0))\n"
    "    with pyro.plate('n', len(y)):\n"
    "        pyro.sample('y', dist.Normal(mu, 1.0), obs=y)\n"
    "for _ in range(2):  # the same cell run twice\n"
    "    entry = zoo.register('nb_model', model=m, data={'y': torch.ones(3)}, replace=True)\n"
    "zoo.run('nb_model', 'svi', num_steps=30, num_samples=20).ok",
]


def test_display_in_a_real_kernel():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3")
    client.execute()
    outputs = [cell.outputs for cell in nb.cells]
    html = [o["data"].get("text/html", "") for out in outputs for o in out if "data" in o]
    assert any("ok, posterior draws" in h and "beta_bernoulli" in h for h in html)
    assert any("ground truth: closed form" in h for h in html)
    assert any("three_coin" in h and "engines:" in h for h in html)
    last = [o for o in outputs[-1] if "data" in o][-1]["data"]["text/plain"]
    assert last == "True"
    # progress shows in a notebook (stderr there is not a terminal): tqdm's widget or text bar
    assert any(
        o.get("output_type") == "display_data" or o.get("name") == "stderr" for o in outputs[-1]
    )
