"""The native kernels built for an instruction set other than the machine's own (ANYFORMER_ISA, as
bench_common.py --isa avx2 asks): an unknown one refused, AVX2 alone holding no AVX-512 code."""
import pytest
import torch

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
