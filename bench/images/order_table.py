#!/usr/bin/env python3
"""The table BENCHMARKS.md records for one bench/images/order.sh command: per run, image SLO
attainment per class and over all, refusals, the text class's SLO attainment, the chat rate and
ITL, the turns per class on the shared cores, where the time between turns went (weftd's
/admin/stats cores.turn_us: the hand-over, i.e. the cores' idle time between two turns while work
waited, mean and p99 bucket bound in microseconds; and its grant-to-compute part), and the host's
load average at the run's start and end; then the mean of each configuration's runs and its
ratio to a reference configuration.

    bench/images/order_table.py OUT_DIR [REFERENCE]   (REFERENCE: a run name, default "gate")
"""
import ast
import json
import os
import sys
from collections import defaultdict


def runs(out):
    tags = [f[:-5] for f in os.listdir(out) if f.endswith(".json") and not f.startswith("chat-")]
    return sorted(tags, key=lambda t: int(t.split("-", 1)[0]))


def main():
    out = sys.argv[1]
    ref = sys.argv[2] if len(sys.argv) > 2 else "gate"
    print("| run | S met | M met | L met | images, all classes | refused | text SLO met | chat tokens/s "
          "| ITL p50 / p99 ms | turns text / images | hand-over mean / p99 us | grant-to-compute mean us "
          "| load avg start / end |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    means = defaultdict(list)
    for tag in runs(out):
        r = json.load(open(f"{out}/{tag}.json"))["runs"][0]
        chat = json.loads(open(f"{out}/chat-{tag}.json").read().splitlines()[0])
        cls = {c["name"]: c for c in r["classes"]}
        cores = open(f"{out}/cores-{tag}.txt").read().split("cores: ", 1)[1]
        cores = ast.literal_eval(cores)
        tu = cores.get("turn_us", {})
        ho = tu.get("handover", {})
        g2r = tu.get("grant_to_run", {})
        load = " / ".join(open(f"{out}/load-{tag}.txt").read().split())
        text = chat.get("chat_slo_attainment")
        per = " | ".join("%.3f" % cls[n]["slo_attainment"] if n in cls else "-" for n in ("S", "M", "L"))
        print(f"| {tag} | {per} | **{r['slo_attainment']:.3f}** ({r['slo_met']}/{r['issued']}) | {r['refused']} "
              f"| {'-' if text is None else '%.3f (%d/%d)' % (text, chat['chat_slo_met'], chat['chat_requests'])} "
              f"| {chat['chat_tokens_s']} | {chat['itl_p50_ms']} / {chat['itl_p99_ms']} "
              f"| {cores['turns']['text']} / {cores['turns']['images']} "
              f"| {'%.0f / %.0f' % (ho['mean'], ho['p99']) if ho else '-'} "
              f"| {'%.0f' % g2r['mean'] if g2r else '-'} | {load} |")
        conf = tag.split("-", 1)[1]
        means[conf].append((r["slo_attainment"], text if text is not None else float("nan"), chat["chat_tokens_s"],
                            ho.get("mean", float("nan"))))
    print()
    print("| configuration | runs | images SLO met (mean) | vs " + ref + " | text SLO met (mean) | chat tokens/s (mean) "
          "| hand-over mean us (mean) |")
    print("|---|---|---|---|---|---|---|")
    avg = lambda xs: sum(xs) / len(xs)
    base = avg([m[0] for m in means[ref]]) if ref in means else None
    for conf, ms in means.items():
        img = avg([m[0] for m in ms])
        ratio = "%.2fx" % (img / base) if base else "-"
        print(f"| {conf} | {len(ms)} | {img:.3f} | {ratio} | {avg([m[1] for m in ms]):.3f} | {avg([m[2] for m in ms]):.1f} "
              f"| {avg([m[3] for m in ms]):.0f} |")


if __name__ == "__main__":
    main()
