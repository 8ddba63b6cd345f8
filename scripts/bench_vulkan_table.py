"""scripts/bench_vulkan.py's report as the Markdown table docs/vulkan.md carries: Channel
Vulkan, HF transformers and llama.cpp (flash attention off / on) per figure, and Vulkan's
ratio to llama.cpp with flash attention on (issue 14's targets are stated against it)."""

from __future__ import annotations


def _fmt(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _get(column: dict, kind: str, key: int) -> float | None:
    return column.get(f"{kind}_tok_s", {}).get(str(key))


def rows(report: dict) -> list[tuple[str, str, int]]:
    """(label, kind, key) for every figure the report's settings asked for."""
    s = report["settings"]
    out = [(f"decode tok/s, {c}-token context", "decode", c) for c in s["contexts"]]
    out += [(f"prefill tok/s, {n} tokens", "prefill", n) for n in s["prefill"]]
    return out


def markdown(report: dict) -> str:
    vk = report.get("vulkan", {})
    hf = report.get("hf", {})
    llama = report.get("llama_cpp", {})
    off, on = llama.get("fa_off", {}), llama.get("fa_on", {})
    hf_name = {"bf16-compiled": "HF bf16, static cache + torch.compile",
               "fp32-eager": "HF fp32 eager"}.get(hf.get("mode"), "HF transformers")
    box = report["machine"]
    vulkan = box.get("vulkan") if isinstance(box.get("vulkan"), dict) else {}
    lines = [
        f"{report.get('date', '?')}, {box.get('gpu') or vulkan.get('name', '?')}, driver "
        f"{box.get('driver') or vulkan.get('driver', '?')}, "
        f"medians of {report['settings']['repeat']} runs"
        + (f"; llama.cpp {llama['build'].get('build_commit')}" if "build" in llama else ""),
        "",
        f"| figure | Channel Vulkan | {hf_name} | llama.cpp CUDA, fa off | llama.cpp CUDA, fa on "
        "| Vulkan / llama.cpp fa on |",
        "|---|---|---|---|---|---|",
    ]
    for label, kind, key in rows(report):
        v, fa_on = _get(vk, kind, key), _get(on, kind, key)
        ratio = f"{v / fa_on:.2f}×" if v and fa_on else "—"
        lines.append(f"| {label} | {_fmt(v)} | {_fmt(_get(hf, kind, key))} | "
                     f"{_fmt(_get(off, kind, key))} | {_fmt(fa_on)} | {ratio} |")
    if "snapshot_save_ms" in vk:
        mb = vk["snapshot_bytes"] / 1e6
        lines.append(f"| snapshot save / restore, {vk['snapshot_slots']} slots ({mb:.0f} MB), "
                     f"{vk['snapshot_path']} | {vk['snapshot_save_ms']:.0f} / "
                     f"{vk['snapshot_restore_ms']:.0f} ms | — | — | — | — |")
    if vk.get("dispatches_per_token"):
        lines.append(f"| dispatches per decode step | {vk['dispatches_per_token']} "
                     "| — | — | — | — |")
    return "\n".join(lines) + "\n"
