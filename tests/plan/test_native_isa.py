"""The native kernels built for an instruction set other than the machine's own (ANYFORMER_ISA, as
bench_common.py --isa avx2 asks): an unknown one refused, AVX2 alone holding no AVX-512 code."""
import pytest
import torch
import torch.nn.functional as F

from anyformer.plan import native

from .test_native import _forward_backward, _sdpa, needs_compiler


def test_an_unknown_instruction_set_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv(native.ENV_ISA, "avx9000")
    with pytest.raises(ValueError, match=r"^ANYFORMER_ISA='avx9000': expected one of native, avx2$"):
        native.build_flags()


@pytest.mark.slow
@needs_compiler
def test_built_for_avx2_alone_it_holds_no_avx512_code_and_gives_the_same_answers(monkeypatch, tmp_path):
    """ANYFORMER_ISA=avx2 (bench_common.py --isa avx2): the kernel as a host without AVX-512 builds it, in a
    file of its own, with not one 512-bit register in its code, and as right as the native build."""
    import shutil
    import subprocess
    monkeypatch.setenv(native.ENV_NATIVE_DIR, str(tmp_path / "native"))
    g = torch.Generator().manual_seed(0)
    packed, dy = torch.randn(2, 37, 3, 2, 32, generator=g), torch.randn(2, 37, 64, generator=g)
    built = {}
    try:
        for isa in ("native", "avx2"):
            monkeypatch.setenv(native.ENV_ISA, isa)
            native.library.cache_clear()
            assert native.library() is not None, native.why_unavailable()
            built[isa] = native.library_path()
            y, grad = _forward_backward(lambda t: native.attention_packed(t, True), packed, dy)
            y_ref, g_ref = _forward_backward(lambda t: _sdpa(t, True), packed, dy)
            torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(grad, g_ref, rtol=1e-4, atol=1e-4)
    finally:
        native.library.cache_clear()
    assert built["native"] != built["avx2"] and "-march=x86-64-v3" in native.build_flags()
    if shutil.which("objdump"):
        code = subprocess.run(["objdump", "-d", str(built["avx2"])], capture_output=True, text=True, check=True).stdout
        assert "%zmm" not in code and "%ymm" in code


@pytest.mark.slow
@needs_compiler
def test_the_avx2_build_is_right_for_every_head_size_and_every_kernel(monkeypatch, tmp_path):
    """The AVX2 code splits what the AVX-512 code does at once: a head's row into chunks of two 8-float
    registers (three chunks for 48 floats), keys 8 at a time with a partial last vector, an 8 x 8 transpose.
    Every head size, causal or not, at lengths that leave partial vectors; GELU's two forms and the row
    products at sizes with a scalar tail."""
    monkeypatch.setenv(native.ENV_NATIVE_DIR, str(tmp_path / "native"))
    monkeypatch.setenv(native.ENV_ISA, "avx2")
    native.library.cache_clear()
    try:
        assert native.library() is not None, native.why_unavailable()
        g = torch.Generator().manual_seed(1)
        for head_dim, tokens in ((16, 50), (32, 9), (48, 23), (64, 70)):
            for causal in (False, True):
                packed = torch.randn(2, tokens, 3, 3, head_dim, generator=g)
                dy = torch.randn(2, tokens, 3 * head_dim, generator=g)
                y, grad = _forward_backward(lambda t: native.attention_packed(t, causal), packed, dy)
                y_ref, g_ref = _forward_backward(lambda t: _sdpa(t, causal), packed, dy)
                torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
                torch.testing.assert_close(grad, g_ref, rtol=1e-4, atol=1e-4)
        x, dy = torch.randn(37, 19, generator=g) * 4, torch.randn(37, 19, generator=g)  # a partial last vector
        for approximate in ("none", "tanh"):
            y, grad = _forward_backward(lambda t: native.gelu(t, approximate), x, dy)
            y_ref, g_ref = _forward_backward(lambda t: F.gelu(t, approximate=approximate), x, dy)
            torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(grad, g_ref, rtol=1e-5, atol=1e-5)
        for n_in in (384, 37):
            x, w, b = torch.randn(2, n_in, generator=g), torch.randn(5, n_in, generator=g), torch.randn(5, generator=g)
            torch.testing.assert_close(native.linear_rows(x, w, b), F.linear(x, w, b), rtol=1e-5, atol=1e-4)
    finally:
        native.library.cache_clear()
