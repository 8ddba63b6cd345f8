"""What the undo and regenerate tests share: a session's state as a rollback must give it
back, and the check that it does, for any kind of layer a model has (engine/state/arena.py's
layer planes included)."""

from __future__ import annotations

import numpy as np

from engine.session.session import Session
from engine.session.undo import undo
from engine.state.sampler import SamplingSettings

GREEDY = SamplingSettings()


def session_state(session: Session) -> dict:
    """The live ring, every layer plane the model has, and the rendered transcript."""
    conv = session.conversation
    v, n = conv.arena.views(), conv.ring.n_active
    state = {"counters": v.ring_counters.copy(), "k_cache": v.k_cache[:, :n].copy(),
             "v_cache": v.v_cache[:, :n].copy(), "salience": v.slot_salience[:n].copy(),
             "rendered": session.transcript.rendered}
    state.update({name: getattr(v, name).copy() for name in conv.ring.planes})
    return state


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        else:
            assert a[key] == b[key], key


def assert_undo_and_regenerate_are_exact(session: Session, first: str, second: str,
                                         plane: str) -> None:
    """Two turns; an undo of the second rolls every plane back exactly (`plane`, one of the
    model's layer planes, must have changed in between); then a regenerate decodes the
    same reply from the kept state, leaving the ring, the planes and the transcript as the
    first answer left them."""
    session.boot()
    session.turn(first, GREEDY, 6)
    after_first = session_state(session)
    answer = session.turn(second, GREEDY, 6)
    after_second = session_state(session)
    assert not np.array_equal(after_first[plane], after_second[plane])
    report, _ = undo(session)
    assert report.method == "rollback"
    assert_same(session_state(session), after_first)
    session.turn(second, GREEDY, 6)
    report, pending = undo(session, keep_user=True)
    assert report.method == "rollback" and pending is not None and pending.prefilled
    again = session.respond(pending, GREEDY, 6)
    assert again.prompt_tokens == 0 and again.reply_ids == answer.reply_ids
    state = session_state(session)
    kept = ["k_cache", "v_cache", "rendered", *session.conversation.ring.planes]
    assert_same({key: state[key] for key in kept}, {key: after_second[key] for key in kept})
