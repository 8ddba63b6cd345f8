"""Requests that edit a conversation's past: undo, regenerate, rewind, fork
(docs/protocol.md).

A mixin of EngineServer, run on its compute thread. Undo and regenerate roll the ring back
(engine/session/undo.py) and save the snapshot right after, so that the next start boots warm
into the edited conversation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..session.alternatives import chosen_reply
from ..session.fork import fork_session
from ..session.rewind import RewindPlan, plan_rewind, rewind
from ..session.undo import EditReport, undo
from .runtime import transcript_fields

if TYPE_CHECKING:
    from .protocol import Request
    from .server import EngineServer


class TurnEdits:
    def _on_undo(self: EngineServer, request: Request) -> None:
        runtime = self._runtime(request)
        runtime.disarm_debounce()
        report, _ = undo(runtime.session, keep_user=False)
        self._undone(runtime, request, report)
        self._save(runtime, request.id, wait=False)

    def _on_regenerate(self: EngineServer, request: Request) -> None:
        runtime = self._runtime(request)
        # An earlier reply to bring back instead of a new one: checked before anything moves.
        earlier = chosen_reply(runtime.session, request.args["reply"]) \
            if "reply" in request.args else None
        runtime.disarm_debounce()
        report, pending = undo(runtime.session, keep_user=True)
        # The reply taken back was sampled with `previous_seed`; unless the request names a
        # seed, the new one is sampled with another (its end_of_turn says which).
        self._undone(runtime, request, report,
                     previous_seed=None if pending is None else pending.retried_seed)
        if pending is None:  # the replay found no message to answer (cannot happen)
            raise ValueError("nothing to regenerate: no message is waiting for a reply")
        self._answer(runtime, request.id, pending, request.settings,
                     request.args.get("max_tokens"), reuse=earlier)

    def _undone(self: EngineServer, runtime, request: Request, report: EditReport,
                **extra) -> None:
        self.emit({"type": "undone", "req": request.id, "session": runtime.name,
                   "method": report.method, "reason": report.reason or None,
                   "retracted": report.retracted, "dropped_slots": report.dropped_slots,
                   "ms": round(report.ms, 3), **extra,
                   "transcript": transcript_fields(runtime.session)})
        self._emit_ring(runtime, request.id)

    def _on_fork(self: EngineServer, request: Request) -> None:
        source, new = request.session, request.args["new"]
        runtime = self.sessions.get(source or "")
        if runtime is not None and not runtime.session.unusable:
            runtime.disarm_debounce()
            self._save(runtime, request.id, wait=True)  # fork the state as it is now
        system = request.args.get("system")
        check = None
        if system is not None:  # the template the fork will render it with must take it
            model = runtime.session.model if runtime else self.models.for_session(source)
            check = model.template.check_system_prompt
        report = fork_session(self.data_dir, source, new, system, check,
                              turn=request.args.get("turn"))
        self.emit({"type": "forked", "req": request.id, "session": source, "new": new,
                   "events": report.events, "snapshot_bytes": report.snapshot_bytes,
                   "system_changed": report.system_changed, "turn": report.turn})

    def _on_rewind(self: EngineServer, request: Request) -> None:
        """dry_run: say what a rewind would do (warm or a replay) before the user confirms."""
        runtime = self._runtime(request)
        turn = request.args["turn"]
        if request.args.get("dry_run"):
            plan = plan_rewind(runtime.session, turn)
            self.emit({"type": "rewind_plan", "req": request.id, "session": runtime.name,
                       **plan_fields(plan)})
            return
        runtime.disarm_debounce()
        report = rewind(runtime.session, turn)
        self.emit({"type": "rewound", "req": request.id, "session": runtime.name,
                   **plan_fields(report.plan), "method": report.kind,
                   "ms": round(report.ms, 3),
                   "transcript": transcript_fields(runtime.session)})
        self._emit_ring(runtime, request.id)
        self._save(runtime, request.id, wait=False)


def plan_fields(plan: RewindPlan) -> dict:
    return {"turn": plan.turn, "turns": plan.turns, "kind": plan.kind, "link": plan.link,
            "replay_events": plan.replay_events, "retracted": plan.retracted,
            "text": plan.describe()}
