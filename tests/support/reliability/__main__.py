"""``make reliability``: the long campaigns, ending with one summary line

    reliability: fuzz_execs=N crashes=0 abuse_calls=M crashes=0 kills=K torn=0 resume_exact=K/K
    heaps=H crashes=0 bad_inputs=B model_unchanged=B/B batch1_failures=F unchanged=F/F
    resume_splits=S exact=S/S soak_steps=S leak=0 scratch_acc=A scratch_default=saturated

(one line). Exit status 1 if any campaign found a problem (a crash, a verdict mismatch, a torn
or inexact checkpoint, an unclear error, a changed model, a failed step that changed anything,
a split fit that differs from the whole one, a leak). scratch_acc is
judged (>= 0.95, with range adaptation); at the lr the case was first run at (scratch.ISSUE_LR,
which diverges in PyTorch too) the run must learn or its health record must warn.
--quick runs the short versions (as `make test` does)."""

from __future__ import annotations

import argparse
import sys
import time

from support.reliability import abuse, bad_inputs, failures, fuzz, heaps, kill, resume, scratch, soak


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m support.reliability")
    ap.add_argument("--quick", action="store_true", help="short versions")
    ap.add_argument("--fuzz-execs", type=int, default=1_000_000)
    ap.add_argument("--abuse-calls", type=int, default=100_000)
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--soak-steps", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    if a.quick:
        a.fuzz_execs, a.abuse_calls, a.kills, a.soak_steps = 20_000, 5_000, 4, 4_000
    sizes = list(range(100_000, 1_000_001, 4_000 if not a.quick else 60_000))
    problems: list[str] = []
    t0 = time.time()

    def note(what: str, lines: list[str]) -> None:
        print(f"  {what} ({time.time() - t0:.0f} s)", flush=True)
        problems.extend(f"{what}: {ln}" for ln in lines)

    fz = fuzz.run(a.fuzz_execs, seed=a.seed)
    note(f"fuzz: {fz.execs} execs, {fz.crashes} crashes", fz.log)
    ab = abuse.run(a.abuse_calls, seed=a.seed)
    note(f"abuse: {ab.calls} calls, {ab.crashes} crashes, {ab.mismatches} native/pure-Python mismatches",
         ab.lines)
    kl = kill.run(a.kills, seed=a.seed)
    note(f"kill: {kl.kills} kills, {kl.torn} torn, {kl.resume_exact} resumed exactly", kl.log)
    hp = heaps.run(sizes)
    note(f"heaps: {hp.heaps} heap sizes, {hp.ok} trained and saved, {hp.crashes} crashes", hp.log)
    bd = bad_inputs.run()
    note(f"bad inputs: {bd.cases} cases, {bd.clear} clear, {bd.unchanged} model unchanged, same checkpoint "
         f"{bd.same_checkpoint}", bd.log)
    fl = failures.run()
    note(f"failed steps: {fl.cases} faults at every trained layer of a batch-1 step, {fl.unchanged} left "
         f"everything unchanged, {fl.same_checkpoint}/{fl.runs} runs end in the fault-free checkpoint",
         fl.log)
    rs = resume.run()
    note(f"split fits: {rs.splits} splits, {rs.exact} exact", rs.log)
    sk = soak.run(a.soak_steps)
    note(f"soak: {sk.steps} steps, live heap {sk.live[:1]}..{sk.live[-1:]} bytes", sk.log)
    sc = scratch.run()
    h = sc.health
    note(f"scratch: held-out acc {sc.acc:.4f} after {sc.steps} steps (lr {scratch.LR}, adapt_ranges), "
         f"first-layer weight scale {sc.first_scale:.4g}, {h.get('ranges_grown')} ranges doubled, "
         f"saturated logits {h.get('sat_logits')}",
         [] if sc.acc >= 0.95 else [f"held-out accuracy {sc.acc:.4f} < 0.95; health {h}"])
    hi = scratch.run(epochs=2, lr=scratch.ISSUE_LR)
    hi_warned = any("not learning" in w or "diverg" in w for w in hi.health.get("warnings", []))
    note(f"scratch at the issue's lr {scratch.ISSUE_LR}: held-out acc {hi.acc:.4f}, warnings "
         f"{hi.health.get('warnings')}",
         [] if hi.acc >= 0.95 or hi_warned else ["lr 0.02 neither learnt nor warned"])
    df = scratch.run(epochs=1, adapt=None)
    df_warned = any(w.startswith("saturated") for w in df.first.get("warnings", []))
    note(f"scratch with the Trainer's defaults: held-out acc {df.acc:.4f} after one epoch, first epoch's "
         f"warnings {df.first.get('warnings')}",
         [] if df.acc >= 0.95 or df_warned else ["the defaults neither learnt nor warned 'saturated'"])
    bad = (fz.crashes or ab.crashes or ab.mismatches or kl.torn or kl.resume_exact != kl.kills or hp.crashes
           or bd.clear != bd.cases or bd.unchanged != bd.cases or not bd.same_checkpoint or sk.leak
           or fl.unchanged != fl.cases or fl.same_checkpoint != fl.runs or fl.log or rs.exact != rs.splits
           or rs.log
           or sc.acc < 0.95 or not (hi.acc >= 0.95 or hi_warned) or not (df.acc >= 0.95 or df_warned))
    for p in problems[:40]:
        print("  problem:", p[:400])
    print(f"reliability: fuzz_execs={fz.execs} crashes={fz.crashes} abuse_calls={ab.calls} "
          f"crashes={ab.crashes} "
          f"kills={kl.kills} torn={kl.torn} resume_exact={kl.resume_exact}/{kl.kills} heaps={hp.heaps} "
          f"crashes={hp.crashes} bad_inputs={bd.cases} model_unchanged={bd.unchanged}/{bd.cases} "
          f"batch1_failures={fl.cases} unchanged={fl.unchanged}/{fl.cases} "
          f"resume_splits={rs.splits} exact={rs.exact}/{rs.splits} "
          f"soak_steps={sk.steps} leak={sk.leak} scratch_acc={sc.acc:.4f} "
          f"scratch_default={'acc' if df.acc >= 0.95 else 'saturated' if df_warned else 'SILENT'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
