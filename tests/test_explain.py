"""explain: kernel functions, loops, alignment and the side-by-side alignment of listings."""
import shutil
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from cpulab.compile import artifacts
from cpulab.analysis.why import with_why
from cpulab.measure import symbols
from cpulab.measure.explain import code, compare, profile
from cpulab.plan import toolchain
from cpulab.report import analysis_views
from cpulab import workloads


def artifact(name):
    return artifacts.build_artifact(workloads.get("sha256"), toolchain.BUILTIN[name]).path


def test_loop_alignment():
    assert code.Loop(0x40, 0x60, 5, 34).alignment == 64
    assert code.Loop(0x48, 0x60, 5, 34).alignment == 8
    assert code.Loop(0x1003, 0x1010, 3, 15).alignment == 1


def test_kernel_functions_are_the_kernels_only():
    funcs = code.kernel_functions(artifact("O2"))
    assert "k_run" in funcs and "main" not in funcs and "take_sample" not in funcs
    assert all(f.instructions for f in funcs.values())


def test_kernel_functions_read_from_their_span_are_the_whole_listings():
    """Disassembled over the kernel's span only (a static build's libc is left out), each
    kernel function reads as in the executable's whole listing, padding included."""
    for name in ("O2", "static"):
        exe = Path(artifact(name))
        stems = {n.split(".")[0] for n in code.kernel_symbols(exe.parent / "kernel.o")}
        whole = {n: f for n, f in code.disassemble(exe).items() if n.split(".")[0] in stems and f.instructions}
        funcs = code.kernel_functions(str(exe))
        assert funcs.keys() == whole.keys() and "k_run" in funcs
        for n, f in funcs.items():
            assert [(i.address, i.text) for i in f.instructions] == [(i.address, i.text) for i in whole[n].instructions]
            assert f.size_bytes == whole[n].size_bytes
    assert len(code.disassemble(exe)) > 10 * len(funcs)  # the static build's span leaves most of it out


def test_hot_loop_is_in_the_timed_code():
    funcs = code.kernel_functions(artifact("O0"))
    name, loop = code.hot_loop(funcs)
    assert name in code.timed_functions(funcs) and "verify" not in name and "setup" not in name
    assert loop.instructions > 10 and loop.bytes > 0


def test_same_artifact_explains_as_identical():
    doc = compare.explain(artifact("O2"), artifact("O2"))
    assert doc["identical"] and all(tag == "=" for _, _, tag in doc["rows"])


def test_side_by_side_marks_changes():
    a = [code.Instruction(0, t) for t in ("add eax,ebx", "imul eax,ecx", "ret")]
    b = [code.Instruction(0, t) for t in ("add eax,ebx", "lea eax,[rax+rax*2]", "nop", "ret")]
    tags = [tag for _, _, tag in code.side_by_side(a, b)]
    assert tags[0] == "=" and tags[-1] == "=" and set(tags[1:-1]) <= {"~", "<", ">"} and len(tags) == 4


# ---- the sampled profile ----------------------------------------------------------------

HOTCOLD = Path(__file__).resolve().parent / "kernels" / "hotcold.c"


def hotcold(variant):
    return artifacts.build_executable(HOTCOLD, toolchain.BUILTIN[variant]).path


def test_most_samples_land_in_the_hot_loop():
    prof = profile.profile(hotcold("O2"), seconds=0.3)
    funcs = code.kernel_functions(hotcold("O2"))
    per_func = profile.attribute(funcs, prof["pcs"])
    total = sum(per_func.values())
    assert total >= 30, per_func  # a 97 us timer over 0.3 s: hundreds expected, 30 is a wide floor
    hot = max(per_func, key=per_func.get)
    assert code.stem(hot) == "hot_loop" and per_func[hot] > 0.8 * total, per_func
    region = compare.sampled_region(funcs[hot])
    assert region is not None  # narrowed to the loop, not the whole function
    assert sum(i.samples for i in code.loop_listing(funcs[hot], region)) > 0.5 * per_func[hot]


def test_two_builds_line_up_on_the_same_region():
    doc = compare.explain(hotcold("O1"), hotcold("O3"), profile_code=0.3, names=("O1", "O3"))
    ha, hb = doc["a"]["hot_loop"], doc["b"]["hot_loop"]
    assert code.stem(ha["function"]) == code.stem(hb["function"]) == "hot_loop"
    assert ha["loop"] and hb["loop"] and hb["lined_up"]
    assert ha["sample_share"] > 0.5 and hb["sample_share"] > 0.5
    why = with_why(doc)["why"]  # the analysis stage's words for the measured evidence
    assert "O3 against O1" in why and "instructions per iteration" in why
    assert len(ha["samples"]) == len(ha["listing"]) == ha["instructions"]


def test_a_double_run_is_not_explained_by_the_float_loop():
    art = artifacts.build_artifact(workloads.get("dot"), toolchain.BUILTIN["O2"]).path
    doc = compare.explain(art, art, {"n": "4096", "precision": "double"}, profile_code=0.3)
    assert code.stem(doc["a"]["hot_loop"]["function"]) == "dot_f64"
    assert doc["identical"]


def test_operands_are_kept_and_addresses_become_symbols():
    i = code.Instruction(0, "add    QWORD PTR [rip+0x2e3c],0x1        # 5010 <counter>")
    assert i.display == "add QWORD PTR [rip+<counter>],0x1"
    j = code.Instruction(0, "jne    1234 <hot_loop+0x14>")
    assert j.display == "jne <hot_loop+0x14>" and j.normalised == "jne <hot_loop+?>"
    assert code.Instruction(0, "mov    rax,QWORD PTR [rdi+rcx*8+0x10]").display == "mov rax,QWORD PTR [rdi+rcx*8+0x10]"


def test_instruction_kinds():
    kinds = lambda t: code.Instruction(0, t).kinds()
    assert kinds("mov rax,QWORD PTR [rdi]") == {"load"}
    assert kinds("mov QWORD PTR [rdi],rax") == {"store"}
    assert kinds("add DWORD PTR [rdi],0x1") == {"load", "store"}
    assert kinds("lea rax,[rdi+rsi*4]") == set()
    assert kinds("jne <f+0x10>") == {"branch"}
    assert kinds("vaddpd ymm0,ymm1,ymm2") == {"vector"}
    assert kinds("mulsd xmm0,QWORD PTR [rax]") == {"load", "fp-scalar"}


def test_a_whole_program_is_profiled_into_its_own_binary():
    src = Path(__file__).resolve().parent / "kernels" / "hotcold_program.c"
    a, b = (str(artifacts.build_tool(src, (flag,))) for flag in ("-O1", "-O2"))
    doc = compare.explain_programs(a, [a], b, [b], ("O1", "O2"))
    ha, hb = doc["a"]["hot_loop"], doc["b"]["hot_loop"]
    assert code.stem(ha["function"]) == code.stem(hb["function"]) == "hot", (ha["function"], hb["function"])
    assert ha["sample_share"] > 0.5 and hb["sample_share"] > 0.5
    assert doc["a"]["profile"]["ticks"] >= 20  # 1 ms of CPU time a tick over ~0.3 s: a wide floor
    assert all(d["function"] for d in doc["differences"])
    shown_doc = {**with_why(doc), "a_name": "O1", "b_name": "O2"}  # as the command shows it
    code_table = next(t for t in analysis_views.explain_tables(shown_doc) if t.name == "code")
    shown = {str(row[0]): [str(c) for c in row[1:]] for row in code_table.rows}
    assert "program instructions" in shown  # a program's own functions, not a kernel's
    runs = doc["a"]["profile"]["runs"]
    assert runs >= 1 and shown["samples in its own code"][0] == f"{doc['a']['profile']['ticks']} in {runs} runs"


def test_a_short_program_is_run_again_until_the_profile_time_is_spent():
    src = Path(__file__).resolve().parent / "kernels" / "hotcold_program.c"
    exe = str(artifacts.build_tool(src, ("-O2",)))
    prof = profile.profile_program(exe, [exe, "0.01"], seconds=0.3)  # 10 ms of CPU a run
    assert prof["runs"] >= 2 and prof["ticks"] >= 1
    true = shutil.which("true")
    with pytest.raises(RuntimeError, match=r"in \d+ runs .* less than one tick"):
        profile.profile_program(true, [true], seconds=0.2)  # its own code: a few instructions


@pytest.mark.parametrize("cc, flags", [("gcc", ["-c"]), ("gcc", []), ("gcc", ["-static"]), ("gcc", ["-m32"]),
                                       ("arm-linux-gnueabi-gcc", ["-mthumb", "-static"]),
                                       ("aarch64-linux-gnu-gcc", ["-static"])])
def test_the_symbol_table_reads_as_pyelftools_reads_it(cc, flags, tmp_path):
    """symbols.symbols (struct) gives every .symtab entry pyelftools gives, field for
    field, on 64- and 32-bit ELF, objects and executables, static ones with libc's."""
    if not shutil.which(cc):
        pytest.skip(f"{cc} is not installed")
    src, out = tmp_path / "s.c", tmp_path / "s.out"
    src.write_text("static int g(int x) { return x * 3; }\nint f(int x) { return g(x) + 1; }\n"
                   "int main(int c, char **v) { (void)v; return f(c); }\n")
    if subprocess.run([cc, "-O1", *flags, str(src), "-o", str(out)], capture_output=True).returncode:
        pytest.skip(f"{cc} {' '.join(flags)} cannot build here (multilib?)")
    with open(out, "rb") as f:
        elf = ELFFile(f)
        want = [(s.name, s["st_value"], s["st_size"], s["st_info"]["type"], s["st_shndx"] != "SHN_UNDEF")
                for s in elf.get_section_by_name(".symtab").iter_symbols()]
        machine = {"EM_X86_64": 62, "EM_386": 3, "EM_ARM": 40, "EM_AARCH64": 183}[elf["e_machine"]]
    got = [(s.name, s.value, s.size, s.type, s.defined) for s in symbols.symbols(out)]
    assert got == want and len(got) > 3 and symbols.machine(out) == machine
    with pytest.raises(ValueError):
        symbols.symbols(src)
