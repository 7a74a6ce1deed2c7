"""oneDNN linear layers for gradient-free CPU passes: same function as nn.Linear, same parameters and saves,
nn.Linear's own path wherever a gradient, a GPU or autocast is involved."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from qrag.training.model import cpu_linear
from qrag.training.model.cpu_linear import CPULinear, use_cpu_linears
from qrag.training.model.encoders import BUNDLED_MINILM
from qrag.training.model.qnet import QNetwork
from qrag.training.search.searcher import load_model

needs_onednn = pytest.mark.skipif(not cpu_linear.available(), reason="this torch build has no oneDNN linear")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The input shapes the oneDNN op was called with (the op itself still runs)."""
    seen: list[tuple[int, ...]] = []
    op = getattr(torch.ops.mkldnn, "_linear_pointwise", None)  # None in a torch build without it

    class Spy:
        def _linear_pointwise(self, x: torch.Tensor, *rest: object) -> torch.Tensor:
            seen.append(tuple(x.shape))
            assert op is not None, "CPULinear called a oneDNN op this torch build does not have"
            return op(x, *rest)

    monkeypatch.setattr(torch.ops, "mkldnn", Spy())
    return seen


@pytest.fixture
def recheck() -> Iterator[None]:
    """`available()` decided afresh inside the test (under its patches) and again after it."""
    cpu_linear.available.cache_clear()
    yield
    cpu_linear.available.cache_clear()


def assert_takes_torch_path(calls: list[tuple[int, ...]]) -> None:
    """With the oneDNN path refused, a gradient-free pass is `F.linear` itself and never calls the op."""
    assert not cpu_linear.available()
    plain, fast = linear()
    x = torch.randn(3, 16)
    with torch.no_grad():
        assert torch.equal(fast(x), plain(x))
    assert calls == []


def linear(bias: bool = True) -> tuple[nn.Linear, CPULinear]:
    torch.manual_seed(0)
    plain = nn.Linear(16, 8, bias=bias)
    fast = nn.Linear(16, 8, bias=bias)
    fast.load_state_dict(plain.state_dict())
    use_cpu_linears(fast)
    assert isinstance(fast, CPULinear)
    return plain, fast


@needs_onednn
@pytest.mark.parametrize("shape", [(5, 16), (3, 7, 16), (1, 1, 16)])
@pytest.mark.parametrize("bias", [True, False])
def test_gradient_free_cpu_pass_runs_onednn_and_equals_nn_linear(shape: tuple[int, ...], bias: bool,
                                                                 calls: list[tuple[int, ...]]) -> None:
    plain, fast = linear(bias)
    x = torch.randn(*shape)
    with torch.no_grad():
        out = fast(x)
    assert calls == [shape]
    assert out.shape == (*shape[:-1], 8)
    torch.testing.assert_close(out, plain(x).detach(), atol=1e-5, rtol=1e-5)
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), out)
    assert len(calls) == 2
    if x.dim() == 2:  # a non-contiguous input (a transposed view)
        xt = torch.randn(16, shape[0]).t()
        with torch.no_grad():
            torch.testing.assert_close(fast(xt), plain(xt).detach(), atol=1e-5, rtol=1e-5)


def test_passes_that_need_a_gradient_or_autocast_take_nn_linear_path(calls: list[tuple[int, ...]]) -> None:
    plain, fast = linear()
    x = torch.randn(4, 16, requires_grad=True)
    fast(x).square().sum().backward()
    grads = (x.grad.clone(), fast.weight.grad.clone(), fast.bias.grad.clone())  # type: ignore[union-attr]
    x.grad = None
    plain(x).square().sum().backward()
    assert torch.equal(grads[0], x.grad)  # bit for bit: the same F.linear call
    assert torch.equal(grads[1], plain.weight.grad) and torch.equal(grads[2], plain.bias.grad)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        low = fast(x)
        assert low.dtype == torch.bfloat16 and torch.equal(low, plain(x))  # autocast's own bf16 GEMM
    assert calls == []


def test_env_switch_turns_onednn_off(monkeypatch: pytest.MonkeyPatch, calls: list[tuple[int, ...]],
                                     recheck: None) -> None:
    monkeypatch.setenv(cpu_linear.ENV, "torch")
    assert_takes_torch_path(calls)


def test_a_mistyped_env_switch_names_the_value_and_the_choices(monkeypatch: pytest.MonkeyPatch, recheck: None) -> None:
    monkeypatch.setenv(cpu_linear.ENV, "mkl")
    _, fast = linear()
    with torch.no_grad(), pytest.raises(ValueError, match=r"QRAG_CPU_LINEAR='mkl'.*'torch'.*'onednn'"):
        fast(torch.randn(3, 16))


def test_swap_keeps_parameters_saves_and_lora_wrapping() -> None:
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Sequential(nn.Linear(6, 3)))
    params = [id(p) for p in net.parameters()]
    keys = list(net.state_dict())
    assert use_cpu_linears(net) == 2
    assert [type(m) for m in (net[0], net[2][0])] == [CPULinear, CPULinear]
    assert [id(p) for p in net.parameters()] == params and list(net.state_dict()) == keys
    assert use_cpu_linears(net) == 0  # already swapped
    wrapped = get_peft_model(net, LoraConfig(r=2, target_modules=["0"]))  # type: ignore[arg-type]
    wrapped.base_model.model[0].lora_B["default"].weight.data.normal_()
    x = torch.randn(4, 6)
    with_grad = wrapped(x)
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x), with_grad.detach(), atol=1e-5, rtol=1e-5)


def test_every_way_to_build_a_network_swaps_its_linears() -> None:
    built = QNetwork.from_encoder(BUNDLED_MINILM, train_mode="lora")
    served = load_model("qrag/babilong-minilm-cpu")  # from_pretrained, LoRA merged into the state tower
    for qnet in (built, served):
        assert {type(m) for m in qnet.modules() if isinstance(m, nn.Linear)} == {CPULinear}


@needs_onednn
def test_qnetwork_towers_run_onednn_and_match_the_torch_path(monkeypatch: pytest.MonkeyPatch, recheck: None) -> None:
    qnet = QNetwork.from_encoder(BUNDLED_MINILM, train_mode="lora")
    texts = ["Mary went to the kitchen.", "Where is the milk? The milk is in the garden, said John."]
    with torch.no_grad():
        fast = (qnet.embed_chunks(texts), qnet.embed_states(["Where is Mary?"], [texts]))
    monkeypatch.setenv(cpu_linear.ENV, "torch")
    cpu_linear.available.cache_clear()
    with torch.no_grad():
        slow = (qnet.embed_chunks(texts), qnet.embed_states(["Where is Mary?"], [texts]))
    for a, b in zip(fast, slow, strict=True):  # a different GEMM, the same function up to float rounding
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
        assert F.cosine_similarity(a, b).min() > 1 - 1e-6


def test_other_architectures_keep_torch_path(monkeypatch: pytest.MonkeyPatch, calls: list[tuple[int, ...]],
                                             recheck: None) -> None:
    monkeypatch.setattr(cpu_linear.platform, "machine", lambda: "arm64")
    assert_takes_torch_path(calls)


@pytest.mark.parametrize("op", ["missing", "wrong", "raises"])
def test_a_torch_without_a_working_op_falls_back_to_f_linear(monkeypatch: pytest.MonkeyPatch, op: str,
                                                             recheck: None) -> None:
    class NoOp:  # the namespace without the op
        pass

    class WrongOp:  # an op that disagrees with F.linear
        def _linear_pointwise(self, x: torch.Tensor, w: torch.Tensor, *rest: object) -> torch.Tensor:
            return torch.zeros(*x.shape[:-1], w.shape[0])

    class RaisingOp:  # an op whose signature changed
        def _linear_pointwise(self, *args: object) -> torch.Tensor:
            raise RuntimeError("unknown argument")

    monkeypatch.setattr(torch.ops, "mkldnn", {"missing": NoOp, "wrong": WrongOp, "raises": RaisingOp}[op]())
    assert_takes_torch_path([])  # a call to the stand-in would show: zeros from "wrong", an error from "raises"
