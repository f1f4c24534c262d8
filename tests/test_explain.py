"""explain: kernel functions, loops, alignment and the side-by-side alignment of listings."""
from cpulab import build, explain, toolchain, workloads


def artifact(name):
    return build.build_artifact(workloads.get("sha256"), toolchain.BUILTIN[name]).path


def test_loop_alignment():
    assert explain.Loop(0x40, 0x60, 5, 34).alignment == 64
    assert explain.Loop(0x48, 0x60, 5, 34).alignment == 8
    assert explain.Loop(0x1003, 0x1010, 3, 15).alignment == 1


def test_kernel_functions_are_the_kernels_only():
    funcs = explain.kernel_functions(artifact("O2"))
    assert "k_run" in funcs and "main" not in funcs and "take_sample" not in funcs
    assert all(f.instructions for f in funcs.values())


def test_hot_loop_is_in_the_timed_code():
    funcs = explain.kernel_functions(artifact("O0"))
    name, loop = explain.hot_loop(funcs)
    assert name in explain.timed_functions(funcs) and "verify" not in name and "setup" not in name
    assert loop.instructions > 10 and loop.bytes > 0


def test_same_artifact_explains_as_identical():
    doc = explain.explain(artifact("O2"), artifact("O2"))
    assert doc["identical"] and all(tag == "=" for _, _, tag in doc["rows"])


def test_side_by_side_marks_changes():
    a = [explain.Instruction(0, t) for t in ("add eax,ebx", "imul eax,ecx", "ret")]
    b = [explain.Instruction(0, t) for t in ("add eax,ebx", "lea eax,[rax+rax*2]", "nop", "ret")]
    tags = [tag for _, _, tag in explain.side_by_side(a, b)]
    assert tags[0] == "=" and tags[-1] == "=" and set(tags[1:-1]) <= {"~", "<", ">"} and len(tags) == 4
