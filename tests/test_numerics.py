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


MASKED = '''
@triton.jit
def cumsum(s, o, REVERSE: tl.constexpr):
    m_s = tl.where(o_i[:, None] >= o_i[None, :], 1., 0.)
    if REVERSE:
        b_o = tl.dot(tl.trans(m_s), b_s, allow_tf32=False)
    else:
        b_o = tl.dot(m_s, b_s, allow_tf32=False)
    return b_o
'''


def test_a_setting_removed_with_its_call_is_a_note_not_a_relaxation() -> None:
    """fla's 9406930f: masked FP32 dots replaced by tl.cumsum. The dots and their allow_tf32=False leave together;
    no dot runs at the TF32 default afterwards."""
    cand = MASKED.replace("tl.dot(tl.trans(m_s), b_s, allow_tf32=False)", "tl.cumsum(b_s, axis=0, reverse=True)")
    cand = cand.replace("tl.dot(m_s, b_s, allow_tf32=False)", "tl.cumsum(b_s, axis=0)")
    found = numerics.diff(MASKED, cand, "cumsum.py")
    assert found.flagged == ()
    assert len(found.notes) == 2 and all("removed with its call (2 tl.dot call(s) fewer" in n for n in found.notes)
    assert numerics.compare(MASKED, cand, "cumsum.py") == []


def test_a_call_that_stays_and_loses_its_setting_is_flagged_even_beside_a_removed_one() -> None:
    """The adversary: drop one dot (its setting leaves with it) and strip allow_tf32=False from the other, which now
    runs at Triton's TF32 default. One removal is explained by a vanished call, the other is not."""
    cand = MASKED.replace("tl.dot(tl.trans(m_s), b_s, allow_tf32=False)", "tl.cumsum(b_s, axis=0, reverse=True)")
    cand = cand.replace("tl.dot(m_s, b_s, allow_tf32=False)", "tl.dot(m_s, b_s)")
    found = numerics.diff(MASKED, cand, "cumsum.py")
    assert len(found.flagged) == 2 and all("2 -> 0; 1 of them with their calls" in m for m in found.flagged)


def test_a_call_moved_elsewhere_without_its_setting_is_flagged() -> None:
    """The dot count stays (one removed, a bare one added): the setting did not leave with its call."""
    cand = MASKED.replace("tl.dot(tl.trans(m_s), b_s, allow_tf32=False)", "tl.dot(tl.trans(m_s), b_s)")
    assert len(numerics.compare(MASKED, cand, "cumsum.py")) == 2


def test_a_tolerance_is_a_number_written_in_code_not_a_name_passed_on() -> None:
    """fla's attnres change (#916) passes ``eps=eps`` to one more kernel: no tolerance changed, nothing flagged
    (the rule once read the name's first letter as a number). Literal values, also as annotated defaults, are."""
    base = "def f(x, eps: float = 1e-6):\n    return k(x, eps=eps)\n"
    passed_on = base + "def g(x, eps: float = 1e-6):\n    return k2(x, eps=eps, rtol=rtol)\n"
    assert numerics.diff(base, base.replace("return k(", "return k3("), "f.py").flagged == ()
    found = numerics.compare(base, passed_on, "f.py")
    assert found == ["f.py:3: tolerance added (eps:float=1e-6, 1 -> 2)"], found
    loosened = base.replace("eps: float = 1e-6", "eps: float = 1e-2")
    assert numerics.compare(base, loosened, "f.py") == [
        "f.py:1: tolerance added (eps:float=1e-2, 0 -> 1)", "f.py:1 (BENCH_BASE): tolerance removed (eps:float=1e-6, 1 -> 0)"]
    for text in ("atol=.5", "rtol = 2e-3", "tol=+1E-4", "eps=0"):
        assert numerics.compare(base, base + f"y = h({text})\n", "f.py"), text
    for text in ("eps=eps", "atol=self.atol", "rtol=e", "eps=eps_value"):
        assert numerics.compare(base, base + f"y = h({text})\n", "f.py") == [], text
