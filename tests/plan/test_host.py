"""The machine key: CPU model and the flags that pick kernels, torch, threads."""
import torch

from anyformer.plan import host

INTEL = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512vl avx512_vnni
processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz
"""
ARM = """processor\t: 0
Features\t: fp asimd evtstrm aes sve bf16 i8mm
CPU implementer\t: 0x41
"""


def test_parse_cpuinfo_keeps_only_the_flags_that_matter():
    info = host.parse_cpuinfo(INTEL)
    assert info == {"model": "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
                    "flags": ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"]}
    assert not host.native_bf16(info["flags"])
    arm = host.parse_cpuinfo(ARM)
    assert arm["flags"] == ["asimd", "sve", "bf16", "i8mm"] and host.native_bf16(arm["flags"])


def test_a_onednn_cap_below_bf16_means_no_native_bf16(monkeypatch):
    """The AVX2 stand-in (ONEDNN_MAX_CPU_ISA=AVX2) leaves oneDNN no bf16 instructions, whatever the CPU has."""
    assert [host.onednn_isa_allows_bf16(c) for c in ("", "DEFAULT", "AVX2", "avx512_core_vnni", "AVX512_CORE")] \
        == [True, True, False, False, False]
    assert all(host.onednn_isa_allows_bf16(c) for c in ("AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX"))
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert not host.native_bf16()
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert host.native_bf16() == any(f in host.NATIVE_BF16_FLAGS for f in host.cpu_info()["flags"])


def test_key_depends_on_threads_and_names_the_file():
    a, b = host.machine(threads=1), host.machine(threads=2)
    assert a["key"] != b["key"] and a["cpu"] == b["cpu"] == host.cpu_info()["model"]
    assert host.machine(threads=1) == a  # stable
    name = host.file_name(a)
    assert name.endswith(f"-t1-{a['key']}.json") and "/" not in name and torch.__version__.split("+")[0] in name


def test_key_depends_on_the_plans_own_code_and_the_compiler(monkeypatch):
    """Records measured by other plan code, or for a native kernel another compiler built, are not
    read: the key holds a hash of plan/'s sources and the compiler's version line."""
    before = host.machine(threads=1)
    assert before["code"] == host.code_hash() and len(before["code"]) == 12
    monkeypatch.setattr(host, "code_hash", lambda: "0" * 12)
    assert host.machine(threads=1)["key"] != before["key"]
    monkeypatch.undo()
    monkeypatch.setattr(host, "compiler", lambda: "g++ (Debian 99.0) 99.0")
    assert host.machine(threads=1)["key"] != before["key"]


def test_the_code_hash_follows_the_sources(tmp_path, monkeypatch):
    fake = tmp_path / "host.py"
    fake.write_text("x = 1")
    (tmp_path / "native").mkdir()
    (tmp_path / "native" / "kernels.cpp").write_text("int f();")
    monkeypatch.setattr(host, "__file__", str(fake))
    host.code_hash.cache_clear()
    try:
        first = host.code_hash()
        host.code_hash.cache_clear()
        (tmp_path / "native" / "kernels.cpp").write_text("int f(); // changed")
        assert host.code_hash() != first
    finally:
        monkeypatch.undo()
        host.code_hash.cache_clear()


def test_as_ranges():
    from anyformer.doctor import as_ranges
    assert as_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert as_ranges([3]) == "3"
