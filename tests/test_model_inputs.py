"""What models accept, as a new user would try them: image sizes (the ResNets and MobileNets
run any side >= 1 as torchvision's do, the DenseNets only sides their pooling keeps), empty
batches and sequences, bad constructor options, and inputs in other memory layouts and dtypes.

Each accepted input gives an output of the right shape; each refused one a ValueError or
TypeError that names the argument or the shape expected, never an error from deep inside a
layer. The property tests draw batch sizes, lengths, image sides, layouts and dtypes with
hypothesis; the models they use are built once (module-level cache), small and in eval mode.
"""

from __future__ import annotations

import re
import typing
from typing import Any

import pytest
import torch
import torch.nn as nn
import torchvision
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from published import randomize_batchnorm, randomize_linear
from torch_geometric.data import Data

import zoo
from zoo.architectures.layers import InputDTypeError
from zoo.architectures.mobilenet import MobileNet
from zoo.architectures.moe.moe_transformer import MoEOutput

PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TINY_MOE = dict(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=24, num_experts=4, top_k=2)
IMAGE_ARCHS = [arch for arch in zoo.list_models() if zoo.store.weight_entries.input_kind(arch) == "images"]
TEXT_CASES = [
    (arch, head)
    for arch in zoo.list_models()
    if zoo.store.weight_entries.input_kind(arch) == "text"
    for head in zoo.store.weight_entries.supported_heads(arch)
]
TOKEN_HEADS = ("lm", "token_classification")


@pytest.fixture(scope="module", autouse=True)
def _few_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(min(threads, 4))
    yield
    torch.set_num_threads(threads)


_MODELS: dict[tuple, nn.Module] = {}


def _model(arch: str, **kwargs: Any) -> nn.Module:
    """A model built once for the whole file (hypothesis runs each test many times)."""
    key = (arch, *sorted(kwargs.items()))
    if key not in _MODELS:
        torch.manual_seed(0)
        _MODELS[key] = zoo.load(arch, pretrained=False, **kwargs).eval()
    return _MODELS[key]


def _names_the_problem(error: Exception, *fragments: str) -> None:
    """A ValueError/TypeError (not a RuntimeError from inside a layer) whose message holds
    one of ``fragments``: the argument's name or the shape or dtype expected."""
    assert isinstance(error, (ValueError, TypeError)), f"{type(error).__name__}: {error}"
    message = str(error)
    assert any(f in message for f in fragments), f"{message!r} names none of {fragments}"


# --- 1. image sizes: what torchvision accepts, zoo accepts, with equal outputs -------------------

TORCHVISION_PAIRS = ["resnet18", "densenet121", "mobilenet_v2"]
SIDES = [(1, 1), (2, 2), (7, 7), (28, 28), (29, 29), (31, 31), (32, 32), (33, 33), (1, 33), (33, 28), (28, 40)]


@pytest.fixture(scope="module", params=TORCHVISION_PAIRS)
def pair(request: pytest.FixtureRequest) -> tuple[str, nn.Module, nn.Module]:
    arch = request.param
    torch.manual_seed(0)
    reference = randomize_linear(randomize_batchnorm(getattr(torchvision.models, arch)())).eval()
    ours = zoo.load(arch, pretrained=False)
    ours.load_state_dict(reference.state_dict())
    return arch, reference, ours.eval()


def _run(model: nn.Module, x: torch.Tensor) -> torch.Tensor | Exception:
    try:
        with torch.no_grad():
            return model(x)
    except Exception as error:  # noqa: BLE001 - the test compares which inputs fail
        return error


@pytest.mark.parametrize("side", SIDES, ids=[f"{h}x{w}" for h, w in SIDES])
def test_zoo_accepts_exactly_the_sizes_torchvision_accepts(pair, side: tuple[int, int]) -> None:
    arch, reference, ours = pair
    x = torch.randn(2, 3, *side, generator=torch.Generator().manual_seed(1))
    expected, got = _run(reference, x), _run(ours, x)
    if isinstance(expected, Exception):
        assert isinstance(got, ValueError), f"{arch} {side}: torchvision fails ({expected}), zoo gave {got!r}"
        assert f"at least {ours.min_input_size}x{ours.min_input_size}" in str(got)
        assert min(side) < ours.min_input_size
    else:
        assert isinstance(got, torch.Tensor), f"{arch} {side}: torchvision runs, zoo raised {got!r}"
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
        assert min(side) >= ours.min_input_size


def test_densenet121_smallest_side_is_torchvisions() -> None:
    """torchvision's densenet121 runs from 29 px (its transitions' 2x2 pools need 2 px)."""
    reference = torchvision.models.densenet121().eval()
    with torch.no_grad():
        reference(torch.randn(1, 3, 29, 29))
        with pytest.raises(RuntimeError):
            reference(torch.randn(1, 3, 28, 28))
    assert zoo.load("densenet121", pretrained=False).min_input_size == 29


def test_resnet18_gray_28px_and_1px() -> None:
    """The report: resnet18 with in_chans=1 refused 28x28 Fashion-MNIST images ("at least 32x32")."""
    model = _model("resnet18", in_chans=1)
    with torch.no_grad():
        assert model(torch.randn(2, 1, 28, 28)).shape == (2, 1000)
        assert model(torch.randn(1, 1, 1, 1)).shape == (1, 1000)
        assert model.forward_features(torch.randn(1, 1, 28, 28)).shape == (1, 512, 1, 1)
    assert model.feature_info[-1]["reduction"] == 32 and model.min_input_size == 1
    with pytest.raises(ValueError, match=r"H, W >= 1.*at least 1x1"):
        model(torch.randn(1, 1, 0, 28))


def test_a_wrong_shape_gets_the_hint_that_fixes_it() -> None:
    model = _model("resnet18", in_chans=1)
    with pytest.raises(
        ValueError, match=r"got a 3-D tensor of shape \(1, 28, 28\); add a batch dimension with x\.unsqueeze\(0\)$"
    ):
        model(torch.randn(1, 28, 28))  # one image
    with pytest.raises(ValueError, match=r"got a 3-D tensor of shape \(8, 1, 28\)$"):
        model(torch.randn(8, 1, 28))  # a batch missing a side: unsqueeze(0) would not fix it
    with pytest.raises(ValueError, match=r"load the model with in_chans=3 or convert the images to 1 channel$"):
        model(torch.randn(2, 3, 28, 28))


@pytest.mark.parametrize("arch", [a for a in IMAGE_ARCHS if a != "moe_vit"])
def test_every_cnn_runs_from_its_min_input_size(arch: str) -> None:
    """On the meta device (shapes only, so every registered CNN is cheap): ``min_input_size``
    and larger, odd sides run to (N, num_classes); one pixel less is refused by name."""
    with torch.device("meta"):
        model = zoo.load(arch, pretrained=False).eval()
        smallest = model.min_input_size
        for side in (smallest, smallest + 1, max(smallest, 7), 31, 33):
            out = model(torch.empty(2, 3, side, side + 2))
            assert out.shape == (2, model.num_classes), (arch, side)
        with pytest.raises(ValueError, match=f"at least {smallest}x{smallest}"):
            model(torch.empty(2, 3, smallest - 1, 40))


# --- 2. empty inputs to the MoE models ---------------------------------------------------------


def test_moe_vit_empty_batch() -> None:
    model = _model("moe_vit", **TINY_MOE)
    x = torch.randn(0, 1, 28, 28)
    with torch.no_grad():
        assert model(x).shape == (0, 10)
        out = model(x, return_aux=True)
        assert [level.shape for level in model.forward_intermediates(x, intermediates_only=True)] == [(0, 32, 7, 7)] * 2
    assert isinstance(out, MoEOutput) and out.logits.shape == (0, 10)
    for loss in (out.aux_loss, out.load_balancing_loss, out.router_z_loss):
        assert loss.shape == () and loss.item() == 0.0
    assert out.expert_fractions.shape == (1, 4) and not out.expert_fractions.any()


@pytest.mark.parametrize(("arch", "head"), TEXT_CASES, ids=[f"{a}-{h}" for a, h in TEXT_CASES])
def test_moe_text_empty_sequences(arch: str, head: str) -> None:
    model = _model(arch, head=head, **TINY_MOE)
    ids = torch.zeros(2, 0, dtype=torch.long)
    with torch.no_grad():
        if head in TOKEN_HEADS:
            assert model(ids).shape == (2, 0, model.num_classes)
            out = model(ids, return_aux=True)
            assert out.logits.shape == (2, 0, model.num_classes) and out.aux_loss.item() == 0.0
        else:
            with pytest.raises(ValueError, match=r"at least one token.*\(N, L\) with L >= 1"):
                model(ids)
        # an empty batch of non-empty sequences is fine for every head
        rows = (0, 5) if head in TOKEN_HEADS else (0,)
        out = model(torch.zeros(0, 5, dtype=torch.long), return_aux=True)
        assert out.logits.shape == (*rows, model.num_classes) and out.aux_loss.item() == 0.0


def test_generate_refuses_an_empty_prompt() -> None:
    model = _model("moe_lm", **TINY_MOE)
    with pytest.raises(ValueError, match=r"generate needs a prompt of at least one token.*bos"):
        model.generate(torch.zeros(1, 0, dtype=torch.long), max_new_tokens=3)
    with_bos = zoo.load("moe_lm", pretrained=False, bos_token_id=257, **TINY_MOE).eval()
    with pytest.raises(ValueError, match=r"start from the bos token id 257"):
        with_bos.generate(torch.zeros(1, 0, dtype=torch.long), max_new_tokens=3)
    assert model.generate(torch.zeros(0, 2, dtype=torch.long), max_new_tokens=3).shape == (0, 5)


# --- 3. constructor options --------------------------------------------------------------------


def _builds(arch: str, **kwargs: Any) -> nn.Module:
    with torch.device("meta"):  # no weights: the checks run before any is made
        return zoo.load(arch, pretrained=False, **kwargs)


@pytest.mark.parametrize("arch", IMAGE_ARCHS)
@pytest.mark.parametrize("in_chans", [0, -1, True, 1.5])
def test_in_chans_must_be_a_positive_int(arch: str, in_chans: Any) -> None:
    with pytest.raises(ValueError, match=r"in_chans .*must be an int >= 1"):
        _builds(arch, in_chans=in_chans)


@pytest.mark.parametrize("arch", IMAGE_ARCHS)
def test_num_classes_and_drop_rate_ranges(arch: str) -> None:
    with pytest.raises(ValueError, match=r"num_classes must be"):
        _builds(arch, num_classes=-1)
    with pytest.raises(ValueError, match=r"drop_rate must be a number in \[0, 1\)"):
        _builds(arch, drop_rate=1.5)
    with pytest.raises(ValueError, match=r"drop_rate must be a number in \[0, 1\)"):
        _builds(arch, drop_rate=-0.1)


def _returns(arch: str) -> type | None:
    cls = typing.get_type_hints(zoo.store.weight_entries.get_builder(arch)).get("return")
    return cls if isinstance(cls, type) else None


MOBILENETS = [arch for arch in IMAGE_ARCHS if _returns(arch) is not None and issubclass(_returns(arch), MobileNet)]


@pytest.mark.parametrize("arch", MOBILENETS)
@pytest.mark.parametrize("width_mult", [0, -1, -0.5, 0.0, float("inf"), float("nan")])
def test_width_mult_must_be_positive(arch: str, width_mult: float) -> None:
    with pytest.raises(ValueError, match=r"width_mult must be a finite number > 0"):
        _builds(arch, width_mult=width_mult)
    assert _builds(arch, width_mult=0.25).num_features > 0  # small multipliers still build


@pytest.mark.parametrize(
    ("arch", "kwargs", "option"),
    [
        ("resnet18", dict(groups=0), "groups"),
        ("resnet18", dict(width_per_group=-4), "width_per_group"),
        ("resnet18", dict(stage_channels=(64, 0, 256, 512)), "stage_channels"),
        ("resnet20", dict(se_ratio=0), "se_ratio"),
        ("densenet_bc_40", dict(bn_size=0), "bn_size"),
        ("densenet_bc_40", dict(se_ratio=-1), "se_ratio"),
        ("mobilenet_v2", dict(drop_path_rate=1.0), "drop_path_rate"),
        ("mobilenet_v1", dict(se_ratio=2.0), "se_ratio"),
        ("moe_vit", dict(img_size=0), "img_size"),
        ("moe_vit", dict(patch_size=0), "patch_size"),
        ("moe_vit", dict(patch_size=-4), "patch_size"),
        ("moe_vit", dict(stem_channels=(32, 0)), "stem_channels"),
        ("moe_vit", dict(num_layers=0), "num_layers"),
        ("moe_vit", dict(intermediate_size=0), "intermediate_size"),
        ("moe_lm", dict(drop_rate=2.0), "drop_rate"),
        ("moe_lm", dict(vocab_size=0), "vocab_size"),
        ("dbn", dict(sizes=(784, 0)), "sizes"),
        ("dbn", dict(sizes=(True, 3)), "sizes"),
        ("dbn", dict(drop_rate=-1), "drop_rate"),
        ("gin_sum", dict(hidden_channels=0), "hidden_channels"),
        ("gin_sum", dict(dropout=1.5), "dropout"),
    ],
)
def test_bad_option_is_named(arch: str, kwargs: dict[str, Any], option: str) -> None:
    with pytest.raises(ValueError, match=option):
        _builds(arch, **kwargs)


# --- 2 and 4 as properties: batch sizes, lengths, sides, layouts, dtypes ------------------------

PROPERTY_CNNS = [
    ("resnet20", dict(in_chans=1)),
    ("resnet18", dict(in_chans=1, stage_channels=(8, 16, 16, 32))),
    ("densenet_bc_40", dict(in_chans=1)),
    ("mobilenet_v3_small_cifar", dict(in_chans=1)),
    ("mobilenet_v2", dict(in_chans=1, width_mult=0.25)),
    ("moe_vit", dict(in_chans=1, **TINY_MOE)),
]
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8)


@st.composite
def _dtypes(draw: st.DrawFn) -> torch.dtype:
    """float32 about half the time, else one of the others."""
    return draw(st.sampled_from(DTYPES[1:])) if draw(st.booleans()) else torch.float32


def _layouts(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """The same values as ``x`` (N, C, H, W) in other memory layouts: a transposed view of a
    (N, C, W, H) tensor, channels_last, and every other column of a wider tensor."""
    wide = x.new_zeros(*x.shape[:3], 2 * x.shape[3])
    wide[..., ::2] = x
    return {
        "transposed": x.transpose(2, 3).contiguous().transpose(2, 3),
        "channels_last": x.to(memory_format=torch.channels_last),
        "strided": wide[..., ::2],
    }


@PROPERTY
@given(case=st.sampled_from(PROPERTY_CNNS), height=st.integers(0, 33), width=st.integers(0, 33))
def test_image_models_accept_exactly_the_sides_that_run(case, height, width) -> None:
    arch, kwargs = case
    model = _model(arch, **kwargs)
    smallest = model.min_input_size
    multiple = getattr(model, "patch_size", 1)  # moe_vit: sides are multiples of its patch size
    fits = min(height, width) >= smallest and height % multiple == 0 and width % multiple == 0
    try:
        with torch.no_grad():
            out = model(torch.randn(1, 1, height, width))
    except (ValueError, TypeError) as error:
        event("refused")
        assert not fits, f"{arch} refused {height}x{width}: {error}"
        _names_the_problem(error, f"H, W >= {smallest}", f"multiples of patch_size={multiple}")
        return
    event("ran")
    assert fits and out.shape == (1, model.num_classes) and torch.isfinite(out).all()


def _valid_side(model: nn.Module, largest: int = 16) -> st.SearchStrategy[int]:
    """Sides up to ``largest`` that fit the model: at least its min_input_size, multiples of
    moe_vit's patch size (small: here the layout and dtype matter, not the size)."""
    multiple = getattr(model, "patch_size", 1)
    return st.integers(-(-model.min_input_size // multiple), largest // multiple).map(lambda k: k * multiple)


@PROPERTY
@given(case=st.sampled_from(PROPERTY_CNNS), batch=st.integers(0, 3), dtype=_dtypes(), data=st.data())
def test_image_models_on_any_batch_layout_and_dtype(case, batch, dtype, data) -> None:
    """Every layout of the same values gives the contiguous input's output; another dtype
    than the weights' is refused, in every layout, by an error that names float32."""
    arch, kwargs = case
    model = _model(arch, **kwargs)
    height, width = data.draw(_valid_side(model), "height"), data.draw(_valid_side(model), "width")
    x = torch.randn(batch, 1, height, width, generator=torch.Generator().manual_seed(height * 100 + width))
    x = (x * 40).clamp(0, 255).to(dtype) if dtype == torch.uint8 else x.to(dtype)
    inputs = {"contiguous": x, **_layouts(x)}
    if dtype != torch.float32:
        event(f"refused: {dtype}")
        for tensor in inputs.values():
            with pytest.raises(InputDTypeError, match=re.escape(str(dtype))) as info:
                model(tensor)
            _names_the_problem(info.value, "expects torch.float32 input", "floating-point input (torch.float32")
        return
    event(f"ran: batch {'0' if batch == 0 else '>= 1'}")
    with torch.no_grad():
        out = model(x)
        assert out.shape == (batch, model.num_classes) and out.dtype == torch.float32
        assert torch.isfinite(out).all()
        for layout, tensor in _layouts(x).items():  # the layout changes nothing but rounding
            torch.testing.assert_close(model(tensor), out, atol=1e-4, rtol=1e-4, msg=f"{arch} {layout}")


@PROPERTY
@given(
    batch=st.integers(0, 3),
    form=st.sampled_from(("vectors", "images", "transposed")),
    dtype=_dtypes(),
)
def test_dbn_on_any_batch_layout_and_dtype(batch, form, dtype) -> None:
    model = _model("dbn", sizes=(36, 24, 16))
    if form == "vectors":
        x = torch.rand(batch, 36)
    elif form == "images":
        x = torch.rand(batch, 1, 6, 6)
    else:
        x = torch.rand(36, batch).t()  # (N, 36), non-contiguous
    x = (x * 255).to(dtype) if dtype == torch.uint8 else x.to(dtype)
    try:
        with torch.no_grad():
            out = model(x)
    except (ValueError, TypeError) as error:
        event("refused: dtype")
        assert dtype != torch.float32
        assert isinstance(error, InputDTypeError), error
        _names_the_problem(error, "expects torch.float32 input", "floating-point input")
        return
    event(f"ran: batch {'0' if batch == 0 else '>= 1'}")
    assert dtype == torch.float32
    assert out.shape == (batch, 10) and torch.isfinite(out).all()
    with torch.no_grad():
        torch.testing.assert_close(out, model(x.contiguous().flatten(1)))


@PROPERTY
@given(
    case=st.sampled_from(TEXT_CASES),
    batch=st.integers(0, 3),
    length=st.integers(0, 5),
    ids_form=st.one_of(st.just("int64"), st.sampled_from(("int64", "int32", "transposed", "float"))),
    return_aux=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_text_models_on_any_batch_and_length(case, batch, length, ids_form, return_aux, seed) -> None:
    arch, head = case
    model = _model(arch, head=head, **TINY_MOE)
    g = torch.Generator().manual_seed(seed)
    if ids_form == "transposed":  # (N, L) as a non-contiguous view of (L, N)
        ids = torch.randint(0, 259, (length, batch), generator=g).t()
    else:
        ids = torch.randint(0, 259, (batch, length), generator=g)
        ids = ids.to({"int64": torch.int64, "int32": torch.int32, "float": torch.float32}[ids_form])
    per_token = head in TOKEN_HEADS
    try:
        with torch.no_grad():
            out = model(ids, return_aux=return_aux)
    except (ValueError, TypeError) as error:
        if ids_form == "float":
            event("refused: float ids")
            _names_the_problem(error, "integer tensor")
        else:  # only a sequence classifier with nothing to classify may refuse
            event("refused: no tokens to classify")
            assert not per_token and length == 0, error
            _names_the_problem(error, "(N, L) with L >= 1")
        return
    event(f"ran: {'empty' if batch * length == 0 else 'non-empty'}")
    assert ids_form != "float"
    logits = out.logits if return_aux else out
    rows = (batch, length) if per_token else (batch,)
    assert logits.shape == (*rows, model.num_classes) and torch.isfinite(logits).all()
    if return_aux:
        assert isinstance(out, MoEOutput) and torch.isfinite(out.aux_loss)
        if batch * length == 0:
            assert out.aux_loss.item() == 0.0 and out.router_z_loss.item() == 0.0
    if ids_form == "transposed":
        with torch.no_grad():
            torch.testing.assert_close(logits if not return_aux else out.logits, model(ids.contiguous()))


@PROPERTY
@given(batch=st.integers(0, 3), length=st.integers(0, 4), new=st.integers(0, 3))
def test_generate_on_any_batch_and_prompt_length(batch, length, new) -> None:
    model = _model("moe_lm", **TINY_MOE)
    prompt = torch.randint(0, 256, (batch, length))
    try:
        out = model.generate(prompt, max_new_tokens=new, temperature=0)
    except ValueError as error:
        event("refused: empty prompt")
        assert length == 0
        _names_the_problem(error, "at least one token")
        assert "bos" in str(error)
        return
    event(f"ran: batch {'0' if batch == 0 else '>= 1'}")
    assert length > 0 and out.shape == (batch, length + new) and torch.equal(out[:, :length], prompt)


# --- 4. other dtypes, directly ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_fp32_model_names_the_dtype_it_expects(dtype: torch.dtype) -> None:
    model = _model("resnet20", in_chans=1)
    x = torch.randn(2, 1, 28, 28)
    with pytest.raises(TypeError, match=re.escape(f"expects torch.float32 input; got {dtype}")) as info:
        model(x.to(dtype))
    assert isinstance(info.value, ValueError)  # and a ValueError, like every other input check
    assert "convert it with x.to(torch.float32)" in str(info.value)
    with torch.no_grad():
        torch.testing.assert_close(model(x.to(dtype).float()), model(x.to(dtype).to(torch.float32)))
        if dtype != torch.float64:  # autocast casts the input and the weights alike
            with torch.autocast("cpu", dtype=torch.bfloat16):
                assert model(x.to(dtype)).shape == (2, 10)
    with pytest.raises(TypeError, match=r"floating-point input .*x.float\(\) / 255"):
        model(x.to(torch.uint8))


def test_model_in_another_dtype_takes_that_dtype() -> None:
    model = zoo.load("resnet20", pretrained=False, in_chans=1, dtype=torch.float64)
    with torch.no_grad():
        assert model(torch.randn(2, 1, 28, 28, dtype=torch.float64)).dtype == torch.float64
    with pytest.raises(TypeError, match=r"torch.float64 weights, so it expects torch.float64 input"):
        model(torch.randn(2, 1, 28, 28))


def test_graph_model_names_the_node_feature_dtype() -> None:
    model = _model("gin_sum", in_channels=3, hidden_channels=16, num_layers=2)
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    data = Data(x=torch.randn(3, 3, dtype=torch.float64), edge_index=edge_index, num_nodes=3)
    with pytest.raises(TypeError, match=r"expects torch.float32 node features data.x; got torch.float64"):
        model(data)
    data.x = data.x.long()
    with pytest.raises(TypeError, match=r"floating-point node features data.x .*data.x.float\(\)"):
        model(data)
    data.x = data.x.float()
    with torch.no_grad():
        assert model(data).shape == (1, 2)


def test_non_tensor_input_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"expects a torch.Tensor of shape \(N, 1, H, W\); got list"):
        _model("resnet20", in_chans=1)([[0.0]])
    with pytest.raises(TypeError, match=r"expects a torch.Tensor of shape \(N, 36\)"):
        _model("dbn", sizes=(36, 24, 16))([0.0] * 36)
