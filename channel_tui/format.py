"""Plain-text formatting shared by widgets and screens: boot lines, sizes, durations."""

from __future__ import annotations

import time


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {words or word + 's'}"


def ms(value: float | None) -> str:
    """A duration given in milliseconds, in the unit a person reads fastest."""
    if value is None:
        return "—"
    if value < 10:
        return f"{value:.1f} ms"
    if value < 1000:
        return f"{value:.0f} ms"
    if value < 60_000:
        return f"{value / 1000:.1f} s"
    minutes, seconds = divmod(value / 1000, 60)
    return f"{minutes:.0f} min {seconds:.0f} s"


def reply_stats(figures: dict) -> str:
    """A reply's speed figures, as people compare them: '7 tokens · first token 52 ms ·
    prompt 250 tok/s · reply 42.0 tok/s'. Takes an `end_of_turn` or a boot transcript's
    reply (which has no token count); a figure missing or zero (a regenerate reads no prompt)
    is left out."""
    parts = []
    if figures.get("decode_tokens") is not None:
        parts.append(plural(figures["decode_tokens"], "token"))
    if figures.get("ttft_ms"):
        parts.append(f"first token {ms(figures['ttft_ms'])}")
    if figures.get("prefill_tok_s"):
        parts.append(f"prompt {figures['prefill_tok_s']:,.0f} tok/s")
    if figures.get("decode_tok_s") is not None:
        parts.append(f"reply {figures['decode_tok_s']:.1f} tok/s")
    return " · ".join(parts)


def seconds(value: float) -> str:
    return ms(value * 1000)


def size(n_bytes: int | float | None) -> str:
    if not n_bytes:
        return "0 B"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.{0 if n_bytes >= 10 * scale else 1}f} {unit}"
    return f"{int(n_bytes)} B"


def ago(then: float, now: float | None = None) -> str:
    delta = max(0.0, (time.time() if now is None else now) - then)
    if delta < 60:
        return f"{delta:.0f} s ago"
    if delta < 3600:
        return f"{delta // 60:.0f} min ago"
    if delta < 86400:
        return f"{delta // 3600:.0f} h ago"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(then))


# Why a boot was cold, in the words of someone who never heard of snapshots.
COLD_REASONS = {"no snapshot": "nothing was saved yet",
                "--cold: snapshot ignored": "asked to re-read it (--cold)"}


def boot_line(event: dict) -> str:
    """The one line that tells the user which boot happened and what it cost, in plain
    words: 'Warm boot · resumed your 1,010-token conversation in 6.0 ms (re-reading it would
    take about 20 s)'. The engine's phases are in `phase_line`."""
    events, tokens = event.get("replayed_events", 0), event.get("replayed_tokens", 0)
    kind = event.get("kind")
    if kind == "open":
        return "Session already open in the engine"
    talk = [m for m in event.get("transcript") or []
            if m.get("role") in ("user", "assistant") and not m.get("hidden")]
    if kind == "warm":
        held = event.get("restored_slots", 0)
        took = ms(event.get("restore_ms"))
        line = f"Warm boot · resumed your {held:,}-token conversation in {took}"
        estimate = reread_estimate(event, held + tokens)
        if estimate:
            line += f" (re-reading it would take about {estimate})"
        if events:
            line += f" · then read {plural(events, 'newer line')} in {ms(event.get('replay_ms'))}"
        return line
    reason = event.get("reason") or "no snapshot"
    why = COLD_REASONS.get(reason, reason)
    if event.get("transcript") is not None and not talk:
        return f"Cold boot · a new conversation, ready in {ms(event.get('replay_ms'))}"
    return (f"Cold boot · re-read your conversation ({plural(events, 'line')}, "
            f"{plural(tokens, 'token')}) in {ms(event.get('replay_ms'))}: {why}")


def reread_estimate(event: dict, tokens: int) -> str | None:
    """How long a cold boot would take, from the speed this session's messages were read at
    (the replies' `prefill_tok_s`: the median), or None when none is known."""
    rates = sorted(m["prefill_tok_s"] for m in event.get("transcript") or []
                   if isinstance(m.get("prefill_tok_s"), (int, float)) and m["prefill_tok_s"] > 0)
    if not rates or tokens <= 0:
        return None
    return seconds(tokens / rates[len(rates) // 2])


def phase_line(event: dict) -> str:
    """Per-phase timings, e.g. `read stream 1.2 ms · validate 4.0 ms · copy 15 ms`."""
    phases = event.get("phases_ms") or {}
    parts = [f"{name.replace('_', ' ')} {ms(value)}" for name, value in phases.items()]
    if event.get("snapshot_bytes"):
        parts.append(f"snapshot {size(event['snapshot_bytes'])}")
    if event.get("ring_slots"):
        state = event.get("layer_state")
        about = [f"{size(event['kv_bytes'])} K/V"] if event.get("kv_bytes") else []
        if state:
            about.append(f"{size(state['plane_bytes'])} in the other layers")
        if event.get("context_length"):
            about.append(f"model context {event['context_length']:,}")
        parts.append(f"ring {event['ring_slots']:,} slots" + layer_state(state) +
                     (f" ({', '.join(about)})" if about else ""))
    return " · ".join(parts)


def layer_state(state: dict | None) -> str:
    """A hybrid model's layers, after the ring's size: ` on 3 global layers, 512-token
    windows on 15, 2 conv carries` or ` on 6 global layers, 18 delta-rule states`; empty for a
    model whose layers are all in the ring."""
    if not state:
        return ""
    parts = [f" on {plural(state['ring_layers'], 'global layer')}"]
    if state.get("window_layers"):
        parts.append(f"{state['window']:,}-token windows on {state['window_layers']}")
    if state.get("conv_layers"):
        parts.append(plural(state["conv_layers"], "conv carry", "conv carries"))
    if state.get("delta_layers"):
        parts.append(plural(state["delta_layers"], "delta-rule state"))
    return ", ".join(parts)


def replay_line(done: int, total: int, rate: float | None) -> str:
    """`12,288 / 48,000 tokens · 310 tok/s · 1 min 55 s left` during a cold replay."""
    text = f"{done:,} / {total:,} tokens"
    if rate:
        text += f" · {rate:,.0f} tok/s"
        if total > done:
            text += f" · {seconds((total - done) / rate)} left"
    return text


def snapshot_text(event: dict | None, saved_at: float | None, now: float | None = None) -> str:
    """The status bar's words for the state on disk, from the latest `snapshot` event."""
    if event is None:
        return "not saved yet"
    status = event.get("status")
    if status == "saved":
        return f"saved {ago(saved_at, now) if saved_at is not None else 'just now'}"
    if status == "pending":
        return "saving in a moment"
    if status == "saving":
        return "saving…"
    if status == "exists":
        return "saved, nothing new"
    if status == "failed":
        return f"save failed: {event.get('error') or 'unknown error'}"
    if status == "busy":
        return "saving… (a save is running)"
    if status == "loaded":
        return "saved"
    return str(status)
