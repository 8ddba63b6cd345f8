"""The memory evaluation's result as a table a person reads (the JSON is eval_memory's)."""

from __future__ import annotations


def render_memory_table(result: dict) -> str:
    full = result["full"]
    lines = [f"{'policy':<10} {'budget':>6} {'ppl':>9} {'vs full':>8} {'recall':>7} "
             f"{'answer logprob':>15} {'dialogue ppl':>13}",
             f"{'full':<10} {'100%':>6} {full['ppl']:>9.2f} {'':>8} "
             f"{full['recall_exact']:>7.0%} {full['answer_logprob']:>15.3f} "
             f"{full['dialogue_ppl']:>13.2f}"]
    for name, budgets in result["policies"].items():
        marked = f"{name}*" if name == result["default"] else name
        for budget, s in budgets.items():
            change = s["ppl"] / full["ppl"] - 1.0
            lines.append(f"{marked:<10} {float(budget):>6.1%} {s['ppl']:>9.2f} {change:>+8.1%} "
                         f"{s['recall_exact']:>7.0%} {s['answer_logprob']:>15.3f} "
                         f"{s['dialogue_ppl']:>13.2f}")
    lines.append("* the default policy; ppl is the natural text's, recall is exact match by "
                 "greedy decoding, answer logprob the mean per-token log-probability of the true "
                 "answers, dialogue ppl the fact conversations' perplexity")
    return "\n".join(lines)
