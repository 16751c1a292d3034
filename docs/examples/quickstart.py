"""Quickstart, notebook style: train a GAT on Cora from Python, predict every vertex, reload the model.

Run it as a script (``python docs/examples/quickstart.py``) or cell by cell (``# %%`` markers) in
an editor that understands them.  It uses only defaults: no epochs, learning rate or fanouts are
given, and training stops by itself when validation accuracy stops improving.
"""
# %% Setup: where the data is (any .npz with indptr/indices/features/labels/masks, or an OGB directory)
import os
import sys
from pathlib import Path

import numpy as np
import torch

import argosy
from argosy.shared.models import Blocks

DATA = Path(os.environ.get("ARGOSY_DATASETS", "../shared/datasets")) / "cora.npz"
if not DATA.exists():
    sys.exit(f"{DATA} not found: set ARGOSY_DATASETS to the folder holding cora.npz")
RUN = Path("runs/quickstart-gat")

# %% Train: partition, start sampler/loader/trainer processes, stop at the best validation epoch
res = argosy.train(DATA, model="gat", run_dir=RUN, seed=0)
print(f"test accuracy {res['test_accuracy']:.3f} at epoch {res['best_epoch']} "
      f"(ran {res['epochs']} epochs, {res['wall_seconds']:.0f} s); best weights: {res['best_checkpoint']}")

# %% Predict every vertex with full neighbourhoods, from the best checkpoint
out = argosy.predict(RUN, embeddings=True)
print(f"pred {out['pred'].shape} {out['pred'].dtype}, logits {out['logits'].shape}, "
      f"embeddings {out['embeddings'].shape}; test accuracy {out['test_accuracy']:.3f}")
assert out["test_accuracy"] == res["test_accuracy"]          # the same model the run reported

# The same to a file, from the shell:  argosy predict runs/quickstart-gat --out cora-pred.npz --embeddings

# %% Reload the model: a plain torch.nn.Module, here run on the whole graph at once
model = argosy.load_model(RUN)
print(model)
with np.load(DATA) as z:
    x = torch.from_numpy(z["features"])
    indptr, indices = z["indptr"], z["indices"]
if model.argosy_info["normalize_features"]:                   # preprocessing the run chose (and announced)
    x = x / x.sum(1, keepdim=True).clamp(min=1e-12)
with torch.no_grad():
    logits = model(x, Blocks.full_graph(indptr, indices, num_layers=len(model.layers)))
agree = (logits.argmax(1).numpy() == out["pred"]).mean()
print(f"reloaded model agrees with argosy.predict on {100 * agree:.2f}% of the vertices")
