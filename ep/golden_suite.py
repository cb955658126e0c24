"""L5 golden op-histogram snapshots of one EP, float and int4, and L1 (every build passes
the full ONNX checker): the shared suite.

``ep/<name>/<name>_golden_test.py`` instantiates it with
``globals().update(golden_suite.tests_for("<ep>"))``. Every family's tiny
checkpoint is built for the EP at its primary dtype and its op histogram must
equal ``ep/<name>/golden/<family>.json``; a difference fails with a per-op
diff. The same family built with ``--quant int4`` must pass ep/int4_checks.py
(L1 / L2 against that float build, shared through the module's ``builds``, and
``ep/<name>/golden_int4/<family>.json``). Regenerate intended changes with
``./bazelw run //tools:golden -- --update --ep <name> [--quant int4]`` (testing/golden.py).
"""

from __future__ import annotations

from typing import Callable

import onnx
import pytest

# int4_checks asserts bare comparisons: have pytest explain them as in a test module
pytest.register_assert_rewrite("ep.int4_checks")

from ep import int4_checks  # noqa: E402
from mobius.ep.registry import get_ep  # noqa: E402
from mobius.errors import MobiusError  # noqa: E402
from mobius.quantize.spec import resolve_quant  # noqa: E402
from testing import ep_suite as s, golden  # noqa: E402


def tests_for(ep: str) -> dict[str, Callable]:
    """The test functions for ``ep`` (to put in a test module's globals)."""
    dtype = s.primary_dtype(ep)

    @pytest.mark.parametrize("family", s.family_params(s.ep_family_names(ep)))
    def test_golden(builds, family):
        snap = golden.snapshot(builds.get(family, ep, dtype))
        lines = golden.diff(golden.load(golden.golden_path(ep, family)), snap)
        assert not lines, golden.failure_message(ep, family, lines)

    @pytest.mark.parametrize("family", s.family_params(s.ep_family_names(ep)))
    def test_int4(builds, family):
        if not s.takes_golden_quant(ep):  # refused before anything is read, naming other EPs
            with pytest.raises(MobiusError, match="does not take int4 weights; use"):
                resolve_quant(get_ep(ep), int4_checks.QUANT)
            return
        float_built = builds.get(family, ep, dtype)  # built once: test_golden's
        int4_checks.check(float_built, builds.get(family, ep, dtype, int4_checks.QUANT))

    @pytest.mark.parametrize("family,dtype", s.params(
        [(f, d) for f in s.ep_family_names(ep) for d in s.l1_family_dtypes(ep, f)]))
    def test_full_checker(builds, family, dtype):
        """L1: every model of every build passes the full ONNX checker (strict inference)."""
        built = builds.get(family, ep, dtype)
        for key in built.models:
            onnx.checker.check_model(built.onnx_bytes(key), full_check=True)

    @pytest.mark.parametrize("quant", [None, int4_checks.QUANT])
    def test_no_stale_snapshots(quant):
        stale = golden.stale_files(ep, s.ep_family_names(ep), quant=quant)
        option = f" --quant {quant}" if quant else ""
        assert not stale, (f"golden files of unknown families for {ep}: {stale}; remove them "
                           f"with ./bazelw run //tools:golden -- --update --ep {ep}{option}")

    def test_every_dtype_cohort_shows_every_form(builds):
        """The families built in this EP's other dtypes too (ep_suite.in_every_dtype) hold
        every op of its primary graphs, and every task and attention trait it serves: a
        family that brings a new form joins the cohort, so each form is seen in each dtype."""
        families = s.ep_family_names(ep)

        def forms(name):
            fam = s.family(name)
            ops = {key.split("/")[-1] for key in golden.ops(builds.get(name, ep, dtype))}
            return ops | {f"task {fam.task.name}"} | {f"trait {t}" for t in fam.attention_traits}

        each = {f: forms(f) for f in families}
        shown = set().union(*(each[f] for f in families if s.in_every_dtype(ep, f)))
        missing = {f: sorted(new) for f in families if (new := each[f] - shown)}
        assert not missing, (f"{ep}: forms no family of the {s.EVERY_DTYPE!r} cohort shows (add "
                             f"it to one of these families' cohorts): {missing}")

    tests = {"test_golden": test_golden, "test_int4": test_int4,
             "test_full_checker": test_full_checker,
             "test_no_stale_snapshots": test_no_stale_snapshots}
    if ep != s.GENERIC_EP:  # every family is built in every dtype there
        tests["test_every_dtype_cohort_shows_every_form"] = test_every_dtype_cohort_shows_every_form
    return tests
