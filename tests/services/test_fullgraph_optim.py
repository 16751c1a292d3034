"""The full-graph processes step torch's Adam without importing torch._dynamo, with the same result."""

from __future__ import annotations

import subprocess
import sys

import torch

from argosy.services.trainer.fullgraph.loop import optimizer_step


def test_optimizer_step_equals_opt_step():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
    b.load_state_dict(a.state_dict())
    oa = torch.optim.Adam(a.parameters(), lr=0.01, weight_decay=5e-4)
    ob = torch.optim.Adam(b.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(3):
        x = torch.randn(4, 8)
        for m, o, step in ((a, oa, torch.optim.Adam.step), (b, ob, optimizer_step)):
            o.zero_grad()
            m(x).pow(2).sum().backward()
            step(o)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert ob.state[next(b.parameters())]["step"] == 3


def test_warm_up_and_training_steps_do_not_import_dynamo():
    code = ("import sys, torch\n"
            "from argosy.services.trainer.fullgraph.kernels import warm_up\n"
            "from argosy.services.trainer.fullgraph.loop import optimizer_step\n"
            "warm_up()\n"
            "m = torch.nn.Linear(4, 4); o = torch.optim.Adam([{'params': [m.weight], 'weight_decay': 5e-4},"
            " {'params': [m.bias]}])\n"
            "m(torch.ones(2, 4)).sum().backward(); optimizer_step(o)\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
