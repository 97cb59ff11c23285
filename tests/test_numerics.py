"""kgate.source.numerics: explicit numeric settings a diff adds or removes, as a multiset."""

from __future__ import annotations

from kgate.source import numerics

BASE = '''
@triton.jit
def k(a, b, acc):
    acc = tl.dot(a, b, acc, input_precision="ieee")
    x = tl.dot(a, b)  # allow_tf32=True in a comment is not code
    return acc
'''


def test_unchanged_and_new_default_precision_dots_are_not_flagged() -> None:
    assert numerics.compare(BASE, BASE, "k.py") == []
    more = BASE + "\ndef k2(a, b):\n    return tl.dot(a, b)\n"
    assert numerics.compare(BASE, more, "k.py") == []


def test_removing_an_explicit_precision_switches_to_the_default_and_is_flagged() -> None:
    cand = BASE.replace(', input_precision="ieee"', "")
    msgs = numerics.compare(BASE, cand, "k.py")
    assert msgs == ['k.py:4 (BENCH_BASE): dot_precision removed (input_precision="ieee", 1 -> 0)']


def test_each_rule_fires_on_an_added_line() -> None:
    added = {
        "dot_precision": 'acc = tl.dot(a, b, acc, input_precision="tf32")',
        "tf32_switch": "torch.backends.cuda.matmul.allow_tf32 = True",
        "fast_math": "y = tl.math.fast_expf(x)",
        "low_precision_accumulator": "acc = tl.zeros([64, 64], dtype=tl.float16)",
        "tolerance": "torch.testing.assert_close(a, b, atol=1e-2)",
    }
    for rule, line in added.items():
        msgs = numerics.compare(BASE, BASE + "\n" + line + "\n", "k.py")
        assert msgs and all(rule in m or "dot_precision" in m for m in msgs), (rule, msgs)
        assert any(f"{rule} added" in m for m in msgs), (rule, msgs)


def test_a_second_instance_of_an_existing_setting_is_new() -> None:
    cand = BASE + '\ndef k3(a, b):\n    return tl.dot(a, b, input_precision="ieee")\n'
    assert numerics.compare(BASE, cand, "k.py") == [
        'k.py:9: dot_precision added (input_precision="ieee", 1 -> 2)']
