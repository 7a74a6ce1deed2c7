"""`WatchedTensors.stamp`: equal while the weights are as they were, different after each kind of edit it promises
to see; the one edit it documents as unseen is asserted unseen."""

from __future__ import annotations

import torch
from torch import nn

from qrag.training.model.weight_stamp import WatchedTensors


def module() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 3), nn.LayerNorm(3))
    net.register_buffer("steps", torch.arange(5))  # an int64 tensor: its bits are read as 8 bytes
    return net


def test_a_stamp_is_equal_until_a_weight_changes_in_any_way_it_promises_to_see() -> None:
    net = module()
    watched = WatchedTensors(list(net.parameters()) + list(net.buffers()))
    first = watched.stamp()
    assert watched.stamp() == first  # nothing changed
    weight = net[1].weight
    edits = {
        "an optimiser step": lambda: torch.optim.SGD(net.parameters(), lr=0.1).step(),
        "an in-place add under no_grad": lambda: weight.add_(1.0),
        "load_state_dict": lambda: net.load_state_dict({k: v + 1 for k, v in net.state_dict().items()}),
        "the first element through .data": lambda: weight.data.view(-1)[0].add_(1.0),
        "the last element through .data": lambda: weight.data.view(-1)[-1].add_(1.0),
        "a buffer's last element through .data": lambda: net.steps.data.view(-1)[-1].add_(1),
        "another storage": lambda: setattr(weight, "data", weight.data.clone() * 2),
    }
    for p in net.parameters():
        p.grad = torch.ones_like(p)
    for name, edit in edits.items():
        before = watched.stamp()
        with torch.no_grad():
            edit()
        after = watched.stamp()
        assert after != before, name
        assert watched.stamp() == after, name  # and stable again once read
    with torch.no_grad():
        weight.data.view(-1)[1].add_(1.0)  # a middle entry through .data: documented as unseen (forget_kept)
    assert watched.stamp() == after


def test_tensors_without_a_cpu_view_are_read_by_gathering_their_ends() -> None:
    base = torch.arange(12.0).reshape(3, 4)
    strided = base.t()  # not contiguous: no NumPy view of its bits, its ends gathered instead
    watched = WatchedTensors([strided, torch.zeros(0)])  # an empty tensor is not watched
    assert len(watched.tensors) == 1
    first = watched.stamp()
    base.data[2, 3] = -1.0  # the strided tensor's last element, through .data
    assert watched.stamp() != first
