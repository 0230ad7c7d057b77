"""anyformer's own CPU attention kernel (anyformer.plan.native): built here, checked against SDPA
forward and backward, offered to the plan only where it applies, and never an error where it cannot
be built."""
import pytest
import torch
import torch.nn.functional as F

from anyformer import plan
from anyformer.nn import MLP, MultiHeadAttention
from anyformer.plan import native

# The kernel is compiled with the system's C++ compiler; CI's machine has g++. Where none exists the
# kernel is never offered (tested below with a compiler that is not there).
needs_compiler = pytest.mark.skipif(native._compiler() is None, reason="no C++ compiler on this machine")


@pytest.fixture
def no_library(monkeypatch, tmp_path):
    """A process where the kernel cannot be built: the compiler named by $CXX is missing."""
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    native.library.cache_clear()
    yield
    native.library.cache_clear()


def _sdpa(packed: torch.Tensor, causal: bool) -> torch.Tensor:
    B, N, _, H, D = packed.shape
    q, k, v = (t.transpose(1, 2) for t in packed.unbind(2))
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2).reshape(B, N, H * D)


def _forward_backward(fn, packed, dy):
    packed = packed.detach().requires_grad_()
    y = fn(packed)
    y.backward(dy)
    return y.detach(), packed.grad


@needs_compiler
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("batch,tokens,heads,head_dim", [(3, 50, 4, 16), (2, 67, 2, 32), (1, 5, 3, 48),
                                                         (2, 130, 2, 64), (2, 1, 2, 16)])
def test_matches_sdpa_forward_and_backward(causal, batch, tokens, heads, head_dim):
    g = torch.Generator().manual_seed(tokens)
    packed = torch.randn(batch, tokens, 3, heads, head_dim, generator=g) * 2
    dy = torch.randn(batch, tokens, heads * head_dim, generator=g)
    y_ref, g_ref = _forward_backward(lambda t: _sdpa(t, causal), packed, dy)
    y, grad = _forward_backward(lambda t: native.attention_packed(t, causal), packed, dy)
    assert y.shape == (batch, tokens, heads * head_dim) and y.is_contiguous()
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, g_ref, rtol=1e-4, atol=1e-4)


@needs_compiler
def test_reads_a_projection_in_place_and_takes_strided_input():
    """The layer's view of its projection (B, N, 3*C) -> (B, N, 3, H, D_h), and a tensor whose last
    dimension is not contiguous (copied first) give SDPA's answer."""
    g = torch.Generator().manual_seed(0)
    proj = torch.randn(2, 20, 3 * 2 * 16, generator=g)
    packed = proj.unflatten(-1, (3, 2, 16))
    torch.testing.assert_close(native.attention_packed(packed), _sdpa(packed, False), rtol=1e-5, atol=1e-5)
    strided = torch.randn(2, 20, 3, 2, 32, generator=g).transpose(-1, -2).contiguous().transpose(-1, -2)[..., :16]
    assert strided.stride(-1) != 1
    torch.testing.assert_close(native.attention_packed(strided, True), _sdpa(strided.contiguous(), True),
                               rtol=1e-5, atol=1e-5)


@needs_compiler
@pytest.mark.parametrize("causal,tokens", [(True, 40), (False, 17)])
def test_masked_and_padded_keys_never_turn_into_nan(causal, tokens):
    """A key outside a row's view (a future key, or padding past the last key) can score far above
    the row's maximum; its weight must be 0, not inf * 0 (a review found 88.5 and 266 gave NaN)."""
    for gap in (88.5, 89.0, 266.0):
        packed = torch.zeros(1, tokens, 3, 1, 16)
        packed[..., 0, 0, 0] = 1.0  # queries
        packed[:, :, 1, 0, 0] = torch.linspace(-1.0, 1.0, tokens)  # keys: later keys score higher
        if causal:
            packed[:, -1, 1, 0, 0] = gap * 4  # the last key: seen by the last query only
        else:
            packed[..., 1, 0, 0] = -gap * 4  # every score far below the padding's 0
        packed[..., 2, 0, :] = torch.randn(tokens, 16)
        dy = torch.randn(1, tokens, 16)
        y_ref, g_ref = _forward_backward(lambda t: _sdpa(t, causal), packed, dy)
        y, grad = _forward_backward(lambda t: native.attention_packed(t, causal), packed, dy)
        assert torch.isfinite(y).all() and torch.isfinite(grad).all(), gap
        torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(grad, g_ref, rtol=1e-3, atol=1e-3)


@pytest.mark.slow
@needs_compiler
def test_the_custom_op_is_registered_for_tracing_and_autograd():
    """torch.library's own checks: schema, fake tensors (torch.compile), autograd registration."""
    g = torch.Generator().manual_seed(1)
    packed = torch.randn(2, 9, 3, 2, 16, generator=g, requires_grad=True)
    torch.library.opcheck(torch.ops.anyformer.attention.default, (packed, True))
    compiled = torch.compile(lambda t: native.attention_packed(t, True), backend="aot_eager", fullgraph=True)
    y, grad = _forward_backward(compiled, packed, torch.ones(2, 9, 32))
    y_ref, g_ref = _forward_backward(lambda t: _sdpa(t, True), packed, torch.ones(2, 9, 32))
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, g_ref, rtol=1e-4, atol=1e-4)


@needs_compiler
@pytest.mark.parametrize("causal", [False, True])
def test_a_plain_eager_call_skips_the_custom_op_and_gives_its_bits(causal):
    """Eager calls run the kernels through a bare autograd.Function (no dispatch overhead); a dispatch mode
    (here torch's FLOP counter) sees the custom op instead. Both are the same kernels, to the bit."""
    from torch.utils.flop_counter import FlopCounterMode
    packed = torch.randn(3, 11, 3, 2, 32, generator=torch.Generator().manual_seed(5))
    dy = torch.randn(3, 11, 64, generator=torch.Generator().manual_seed(6))
    with torch.profiler.profile() as prof:
        y, grad = _forward_backward(lambda t: native.attention_packed(t, causal), packed, dy)
    seen = {e.name for e in prof.events()}
    assert "anyformer::attention" not in seen and "anyformer::attention_backward" not in seen
    y_op, g_op = _forward_backward(lambda t: native._attention(t, causal)[0].flatten(2), packed, dy)
    assert torch.equal(y, y_op) and torch.equal(grad, g_op)
    with FlopCounterMode(display=False):
        y_mode, g_mode = _forward_backward(lambda t: native.attention_packed(t, causal), packed, dy)
    assert torch.equal(y_mode, y) and torch.equal(g_mode, grad)


def test_bad_input_says_what_it_takes():
    with pytest.raises(ValueError, match=r"expected qkv of shape \(B, N, 3, H, D_h\), got \(2, 5, 48\)"):
        native.attention_packed(torch.randn(2, 5, 48))
    with pytest.raises(ValueError, match=r"float32 \(or bfloat16\) CPU tensors with D_h in .*got torch.float64 .* D_h=16"):
        native.attention_packed(torch.randn(1, 4, 3, 2, 16, dtype=torch.float64))
    with pytest.raises(ValueError, match="D_h=8"):
        native.attention_packed(torch.randn(1, 4, 3, 2, 8))


def test_no_compiler_means_no_kernel_and_no_error(no_library, planner_with):
    assert native.library() is None
    assert "no C++ compiler" in native.why_unavailable()
    with pytest.raises(RuntimeError, match="not available here .*no C\\+\\+ compiler"):
        native.attention_packed(torch.randn(1, 4, 3, 2, 16))
    p = planner_with({"fused": 1.0, "explicit": 2.0, "native": 0.1})
    assert plan.attention_kernel(2, 2, 50, 50, 16, torch.float32, False, True) == "fused"
    assert p.timer.calls == [["fused", "explicit"]]  # never offered
    with plan.planner().forcing(attention="native"):  # forcing it where it cannot run leaves SDPA
        assert plan.attention_kernel(2, 2, 60, 60, 16, torch.float32, False, True) == "fused"


def test_a_failing_build_means_no_kernel(monkeypatch, tmp_path):
    broken = tmp_path / "cxx"
    broken.write_text("#!/bin/sh\necho 'cxx: out of luck' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("CXX", str(broken))
    monkeypatch.setenv(native.ENV_NATIVE_DIR, str(tmp_path / "native"))
    native.library.cache_clear()
    try:
        assert native.library() is None
        assert "failed" in native.why_unavailable() and "out of luck" in native.why_unavailable()
        assert native.library_path().parent == tmp_path / "native"
        assert not list((tmp_path / "native").iterdir())  # nothing half-written is kept
    finally:
        native.library.cache_clear()


def test_the_builds_folder_is_the_caches_unless_named(monkeypatch, tmp_path):
    monkeypatch.delenv(native.ENV_NATIVE_DIR, raising=False)
    monkeypatch.setenv("ANYFORMER_CACHE", str(tmp_path / "cache"))
    assert native.native_dir() == tmp_path / "cache" / "native"
    monkeypatch.setenv(native.ENV_NATIVE_DIR, str(tmp_path / "shared"))
    assert native.native_dir() == tmp_path / "shared"


@pytest.mark.slow
@needs_compiler
def test_the_plan_offers_it_only_where_it_applies(planner_with):
    p = planner_with({"fused": 1.0, "explicit": 0.5, "native": 0.1})
    assert plan.attention_kernel(2, 2, 50, 50, 16, torch.float32, True, True) == "native"
    entry = p.snapshot()["entries"]
    (key,) = entry
    assert entry[key]["dropped"] == {}  # the kernel agreed with SDPA, gradients included
    # bf16 (an autocast step's projection) too, computed in fp32: it agreed with bf16 SDPA
    assert plan.attention_kernel(2, 2, 50, 50, 16, torch.bfloat16, True, True) == "native"
    bf16 = [e for e in p.snapshot()["entries"].values() if e["fields"]["dtype"] == "bfloat16"]
    assert len(bf16) == 1 and bf16[0]["dropped"] == {}
    # not where it does not apply: other head sizes, fp16, a padding mask, views or a cache
    for args, kw in [((2, 2, 50, 50, 8, torch.float32), {}), ((2, 2, 50, 50, 16, torch.float16), {}),
                     ((2, 2, 50, 50, 16, torch.float32), {"masked": True}),
                     ((2, 2, 50, 50, 16, torch.float32), {"layout": "views"}),
                     ((2, 2, 1, 50, 16, torch.float32), {"layout": "cache"})]:
        assert plan.attention_kernel(*args, False, True, **kw) == "explicit", (args, kw)
    assert all("native" not in calls for calls in p.timer.calls[2:])
    # 49 queries over 52 keys share the bucket of 50 over 50 (56), not the native kernel's case
    assert plan.attention_kernel(2, 2, 50, 50, 16, torch.float32, False, False) == "native"
    assert plan.attention_kernel(2, 2, 49, 52, 16, torch.float32, False, False) == "explicit"
    assert plan.attention_kernel(1, 1, 4096, 4096, 16, torch.float32, True, False) == "explicit"  # too long


def _spy(monkeypatch, name):
    """Counts the calls of anyformer.plan.native.<name> (through the module attribute)."""
    calls = []
    real = getattr(native, name)
    monkeypatch.setattr(native, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@needs_compiler
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.slow
def test_a_layer_on_the_native_kernel_matches_sdpa(causal, monkeypatch):
    calls = _spy(monkeypatch, "attention_packed")
    torch.manual_seed(0)
    layer = MultiHeadAttention(64, 4)
    x = torch.randn(3, 17, 64)

    def prepared(kernel):  # the layer prepared for training calls and the calls without gradients
        with plan.planner().forcing(attention=kernel):
            return plan.prepare(layer, lambda m: m(x.clone().requires_grad_(), causal=causal))

    def run():
        xi = x.clone().requires_grad_()
        layer.zero_grad()
        y = layer(xi, causal=causal)
        y.square().sum().backward()
        return y.detach(), xi.grad, layer.qkv.weight.grad.clone()

    assert prepared("native").attend_packed.training and len(calls) == 0  # chosen, not yet run
    native_run = run()
    assert len(calls) == 1  # the layer took the native kernel
    assert prepared("fused").attend_packed is None
    for a, b in zip(native_run, run()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert len(calls) == 1
    # under torch.func (per-sample gradients) the layer keeps SDPA: a custom op would break vmap
    from torch.func import functional_call, grad, vmap
    params = dict(layer.named_parameters())
    prepared("native")
    per_sample = vmap(grad(lambda p, xi: functional_call(layer, p, (xi[None],), {"causal": causal}).sum()),
                      in_dims=(None, 0))(params, x)
    assert per_sample["qkv.weight"].shape == (3, 3 * 64, 64) and len(calls) == 1
    # calls it cannot take whole (fewer queries, a padding mask) take the layer's other function
    layer.eval()
    with torch.no_grad():
        assert layer.attend_packed.native
        y1 = layer(x, queries=1)
        y2 = layer(x, mask=torch.ones(3, 17, dtype=torch.bool))
        assert len(calls) == 1
        layer(x)
        assert len(calls) == 2  # and the whole call, without gradients, the kernel
        plan.unprepare(layer)
        torch.testing.assert_close(y1, layer(x, queries=1))
        torch.testing.assert_close(y2, layer(x))


# --- GELU --------------------------------------------------------------------------------------------
@needs_compiler
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.slow
def test_gelu_matches_f_gelu_forward_and_backward(approximate):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(37, 19, generator=g) * 4  # 703 elements: the last vector is partial
    x[0, :6] = torch.tensor([0.0, -30.0, 30.0, 1e-6, -1e-6, 88.0])
    dy = torch.randn(37, 19, generator=g)
    y_ref, g_ref = _forward_backward(lambda t: F.gelu(t, approximate=approximate), x, dy)
    y, grad = _forward_backward(lambda t: native.gelu(t, approximate), x, dy)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad, g_ref, rtol=1e-5, atol=1e-5)
    strided = x.t()  # not contiguous: read through a copy, same answer
    torch.testing.assert_close(native.gelu(strided, approximate), F.gelu(strided, approximate=approximate),
                               rtol=1e-5, atol=1e-6)
    torch.library.opcheck(torch.ops.anyformer.gelu.default, (x.detach().requires_grad_(), approximate))


def test_gelu_bad_input_says_what_it_takes():
    with pytest.raises(ValueError, match="approximate must be one of .*got 'erf'"):
        native.gelu(torch.randn(4), "erf")
    with pytest.raises(ValueError, match="takes float32 CPU tensors, got torch.bfloat16"):
        native.gelu(torch.randn(4, dtype=torch.bfloat16))


@pytest.mark.slow
@needs_compiler
def test_the_plan_picks_the_gelu_kernel_by_its_timing(planner_with):
    p = planner_with({"stock": 1.0, "native": 0.4})
    assert plan.gelu_kernel(3000, "tanh", True) == "native"
    (entry,) = p.snapshot()["entries"].values()
    assert entry["dropped"] == {} and entry["fields"] == {"numel": 4096, "approximate": "tanh", "training": True}
    planner_with({"stock": 1.0, "native": 0.95})  # within the margin: F.gelu stays
    assert plan.gelu_kernel(3000, "none", False) == "stock"
    with pytest.raises(ValueError, match="approximate must be one of"):
        plan.gelu_kernel(3000, "erf", False)


def test_without_the_library_gelu_stays_stock(no_library, planner_with):
    p = planner_with({"stock": 1.0, "native": 0.1})
    assert plan.gelu_kernel(3000, "tanh", True) == "stock"
    assert p.timer.calls == []  # one candidate: nothing to time
    with plan.planner().forcing(gelu="native"):
        assert plan.gelu_kernel(5000, "tanh", True) == "stock"


@pytest.mark.slow
@needs_compiler
def test_the_gelu_module_follows_the_plan(monkeypatch):
    calls = _spy(monkeypatch, "gelu")
    x = torch.randn(8, 40) * 3
    outs = {}
    for kernel in ("native", "stock"):
        mlp = MLP(40, 40, activation="gelu_tanh")  # the plan swaps the token-wise GELUs: an MLP's
        with plan.planner().forcing(gelu=kernel):
            plan.prepare(mlp, x.requires_grad_())
        act = mlp.act
        assert act.native_training == (kernel == "native")
        outs[kernel] = _forward_backward(act, x.detach(), torch.ones(8, 40))
    assert len(calls) == 1  # the forced-native call took the kernel, the stock one did not
    for a, b in zip(outs["native"], outs["stock"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    act = plan.prepare(MLP(40, 40, activation="gelu_tanh")).act  # nothing measured: the choice set by hand
    act.native = act.native_few = act.native_training = True
    if True:  # bf16 is not the kernel's: F.gelu
        xb = x.bfloat16()
        assert torch.equal(act(xb), F.gelu(xb, approximate="tanh"))
        torch.func.vmap(act)(x)  # nor under torch.func
    assert len(calls) == 1


# --- a graph of the gradient (create_graph=True) -------------------------------------------------------
def _explicit(packed: torch.Tensor, causal: bool) -> torch.Tensor:
    """softmax(Q K^T / sqrt(D_h)) V written out, the reference with derivatives of every order."""
    B, N, _, H, D = packed.shape
    q, k, v = (t.transpose(1, 2) for t in packed.unbind(2))
    scores = q @ k.transpose(-2, -1) / D ** 0.5
    if causal:
        scores = scores.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, N, H * D)


def _penalty(fn, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A gradient penalty: the gradient of |d sum(fn(x)^2) / dx|^2 with respect to x, and that first gradient."""
    x = x.detach().requires_grad_()
    (g,) = torch.autograd.grad(fn(x).pow(2).sum(), x, create_graph=True)
    (h,) = torch.autograd.grad(g.pow(2).sum(), x)
    return g.detach(), h


@needs_compiler
@pytest.mark.parametrize("causal", [False, True])
def test_a_gradient_penalty_through_the_native_attention_steps_aside_to_torchs_maths(causal):
    packed = torch.randn(2, 9, 3, 2, 32, generator=torch.Generator().manual_seed(3))
    g_ref, h_ref = _penalty(lambda t: _explicit(t, causal), packed)
    g, h = _penalty(lambda t: native.attention_packed(t, causal), packed)
    torch.testing.assert_close(g, g_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(h, h_ref, rtol=1e-3, atol=1e-4)


@needs_compiler
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_a_gradient_penalty_through_the_native_gelu_steps_aside_to_atens_backward(approximate):
    x = torch.randn(7, 300, generator=torch.Generator().manual_seed(4))
    g_ref, h_ref = _penalty(lambda t: F.gelu(t, approximate=approximate), x)
    g, h = _penalty(lambda t: native.gelu(t, approximate), x)
    torch.testing.assert_close(g, g_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h, h_ref, rtol=1e-4, atol=1e-4)


# --- a few rows through a linear layer (a generation step's products) -------------------------------
@needs_compiler
@pytest.mark.parametrize("rows", [1, 2, 4])
@pytest.mark.parametrize("in_features, out_features", [(384, 1152), (37, 5), (16, 2)])
def test_linear_rows_is_f_linear(rows, in_features, out_features):
    """One pass over W, a vector at a time and a scalar tail, a group of rows at once: every size, bias or none."""
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 1, in_features, generator=g)
    w, b = torch.randn(out_features, in_features, generator=g), torch.randn(out_features, generator=g)
    torch.testing.assert_close(native.linear_rows(x, w, b), F.linear(x, w, b), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(native.linear_rows(x, w), F.linear(x, w), rtol=1e-5, atol=1e-4)
    strided = torch.randn(rows, 2 * in_features, generator=g)[:, ::2]  # rows read in place or copied
    torch.testing.assert_close(native.linear_rows(strided, w, b), F.linear(strided, w, b), rtol=1e-5, atol=1e-4)


@needs_compiler
def test_an_output_of_linear_rows_has_the_same_bits_whatever_rows_come_with_it():
    """The kernel streams a group of W's rows at once (16 or 8) and the last, smaller group apart: an
    output's sum must not depend on which group its row fell in, so every count of rows from 1 to 40
    gives the first outputs of the 40-row product bit for bit."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 1, 389, generator=g), torch.randn(40, 389, generator=g)
    whole = native.linear_rows(x, w)
    for out in range(1, 40):
        assert torch.equal(native.linear_rows(x, w[:out]), whole[..., :out]), out


@needs_compiler
def test_linear_rows_refuses_what_it_is_not_for():
    w = torch.randn(3, 8)
    with pytest.raises(ValueError, match="expected 1 to 4 rows of 8 features, got \\(5, 8\\)"):
        native.linear_rows(torch.randn(5, 8), w)
    with pytest.raises(ValueError, match="takes float32 CPU tensors"):
        native.linear_rows(torch.randn(1, 8, dtype=torch.bfloat16), w.bfloat16())


@needs_compiler
def test_the_plan_offers_linear_rows_for_a_few_rows_without_gradients_only(planner_with):
    p = planner_with({"stock": 1.0, "onednn": 1.0, "native": 0.5})
    assert plan.linear_kernel(1, 64, 64, torch.float32, False) == "native"
    assert plan.linear_kernel(4, 64, 64, torch.float32, False) == "native"
    assert plan.linear_kernel(8, 64, 64, torch.float32, False) != "native"  # a GEMM's rows
    assert plan.linear_kernel(1, 64, 64, torch.float32, True) != "native"   # training
    assert plan.linear_kernel(1, 64, 64, torch.bfloat16, False) != "native"
    assert any("native" in e["times"] for e in p.snapshot()["entries"].values())


@needs_compiler
def test_a_layer_on_linear_rows_takes_it_for_a_few_rows_and_f_linear_beyond(monkeypatch):
    calls = _spy(monkeypatch, "linear_rows")
    layer = plan.prepare(torch.nn.Sequential(torch.nn.Linear(8, 3)))[0]
    layer.kernel = layer.few_rows_kernel = "native"  # as prepare leaves a layer whose step chose it
    with torch.no_grad():
        for rows in (1, 4, 5, 64):
            x = torch.randn(rows, 8)
            torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
    assert len(calls) == 2  # 1 and 4 rows; 5 and 64 take F.linear
    layer(torch.randn(1, 8, requires_grad=True)).sum().backward()  # a training call: its own kernel
    assert len(calls) == 2


# --- transpose --------------------------------------------------------------------------------------
@needs_compiler
@pytest.mark.parametrize("shape", [(6400, 128), (128, 6400), (33, 65), (1, 7), (7, 1)])
def test_transposed_rows_are_aten_s_transpose_to_the_bit(shape):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    out = native.transposed_rows(x)
    assert out.is_contiguous() and torch.equal(out, x.t().contiguous())


@needs_compiler
def test_transposed_rows_reads_rows_apart_and_hands_over_what_it_does_not_take():
    big = torch.randn(100, 80)
    rows_apart = big[:, 3:40]  # column stride 1, rows 80 floats apart
    assert torch.equal(native.transposed_rows(rows_apart), rows_apart.t().contiguous())
    for other in (big.t(), big.double(), torch.empty(0, 5)):  # column-strided, float64, empty: ATen's copy
        out = native.transposed_rows(other)
        assert out.dtype == other.dtype and torch.equal(out, other.t().contiguous())
    with pytest.raises(RuntimeError):
        native.transposed_rows(torch.randn(2, 3, 4))  # what x.t() refuses, refused the same way


def test_without_the_library_transposed_rows_is_aten_s_copy(no_library):
    x = torch.randn(40, 24)
    assert native.library() is None
    assert torch.equal(native.transposed_rows(x), x.t().contiguous())


@needs_compiler
@pytest.mark.parametrize("n_out", [16, 96])  # dy the narrower of the two, then x
def test_a_onednn_linear_s_weight_gradient_is_the_same_bits_with_the_tiled_transpose(monkeypatch, n_out):
    from anyformer.plan.kernels import onednn_linear, onednn_linear_op
    if onednn_linear_op() is None:
        pytest.skip("this torch build has no oneDNN")
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(4, 50, 48, generator=g), torch.randn(n_out, 48, generator=g)
    grad = torch.randn(4, 50, n_out, generator=g)

    def weight_gradient():
        wi = w.clone().requires_grad_()
        onednn_linear(x, wi).backward(grad)
        return wi.grad

    tiled = weight_gradient()
    monkeypatch.setattr(native, "transposed_rows", lambda t: t.t().contiguous())
    assert torch.equal(tiled, weight_gradient())
