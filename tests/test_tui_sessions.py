"""Issue 30, item 3, in the app: the session list (Ctrl+O) renames, deletes (with undo) and
searches sessions, and shows each one's model; pilot tests against the REAL engine on the
tiny model (test_tui_app's make_app)."""

from __future__ import annotations

from channel_tui.app import ChannelApp
from channel_tui.screens.confirm import ConfirmScreen
from channel_tui.screens.new_session import NewSessionScreen
from channel_tui.screens.sessions import SessionListScreen
from channel_tui.widgets.message_widgets import UserMessage
from engine.session.manage import list_trash

from .test_tui_app import SIZE, booted, make_app, on_screen, record_events, say, until

__all__ = ["make_app"]  # the fixture, shared with test_tui_app


def notes(app: ChannelApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


def rows(app: ChannelApp) -> list[list[str]]:
    table = app.screen.query_one("#sessions-table")
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


def names(app: ChannelApp) -> list[str]:
    return [row[1] for row in rows(app)]


async def two_sessions(pilot, app: ChannelApp, events: list[dict]) -> None:
    """'alpha' with a message, then 'beta' opened (alpha closed, its snapshot flushed)."""
    await booted(pilot, events)
    await say(pilot, app, "alpha talk about teapots", events)
    await pilot.press("ctrl+n")
    await until(pilot, lambda: on_screen(app, NewSessionScreen), what="Ctrl+N")
    app.screen.query_one("#new-name").value = "beta"
    await pilot.press("enter")
    await booted(pilot, events, 2)
    await say(pilot, app, "beta talk", events)


async def open_list(pilot, app: ChannelApp, select: str | None = None) -> None:
    await pilot.press("ctrl+o")
    await until(pilot, lambda: on_screen(app, SessionListScreen), what="Ctrl+O")
    await pilot.pause(0.1)
    if select is not None:
        app.screen.query_one("#sessions-table").move_cursor(row=names(app).index(select))


async def test_rename_in_the_list_moves_every_file_and_it_boots_warm(make_app, tmp_path):
    data = tmp_path / "data"
    app = make_app(session="alpha")
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await two_sessions(pilot, app, events)
        await open_list(pilot, app, select="beta")
        # Each row shows its model; the open session cannot be renamed under the engine.
        assert all(row[3] == "tiny-test-llama" for row in rows(app))
        await pilot.press("f2")
        await pilot.pause(0.1)
        assert isinstance(app.screen, SessionListScreen)
        assert "'beta' is open here: switch to another session first" in notes(app)[-1]

        app.screen.query_one("#sessions-table").move_cursor(row=names(app).index("alpha"))
        await pilot.press("f2")
        await until(pilot, lambda: on_screen(app, NewSessionScreen), what="the dialog")
        field = app.screen.query_one("#new-name")
        assert field.value == "alpha"
        field.value = "beta"  # taken: said in the dialog, which stays
        await pilot.press("enter")
        await pilot.pause(0.1)
        assert "'beta' is taken" in str(app.screen.query_one("#new-error").render())
        field.value = "teapots"
        await pilot.press("enter")
        await until(pilot, lambda: on_screen(app, SessionListScreen), what="the list")
        await pilot.pause(0.1)
        assert set(names(app)) == {"beta", "teapots"} and notes(app)[-1] == \
            "Renamed 'alpha' to 'teapots'."
        assert sorted(p.name for p in data.glob("teapots.*")) == [
            "teapots.lock", "teapots.model.json", "teapots.snapshot.bin",
            "teapots.stream.jsonl"]
        assert not any(data.glob("alpha.*.*"))  # only its empty lock file stays
        assert names(app)[app.screen.query_one("#sessions-table").cursor_row] == "teapots"
        await pilot.press("enter")
        opened = await booted(pilot, events, 3)
        assert opened["session"] == "teapots" and opened["kind"] == "warm"
        assert [w.render().plain for w in app.chat.query(UserMessage)] == [
            "alpha talk about teapots"]


async def test_delete_asks_goes_to_the_trash_and_u_undoes_it(make_app, tmp_path):
    data = tmp_path / "data"
    app = make_app(session="alpha")
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await two_sessions(pilot, app, events)
        await open_list(pilot, app, select="beta")
        await pilot.press("delete")  # the open one: refused
        await pilot.pause(0.1)
        assert isinstance(app.screen, SessionListScreen)
        assert "'beta' is open here" in notes(app)[-1]
        before = (data / "alpha.stream.jsonl").read_bytes()

        app.screen.query_one("#sessions-table").move_cursor(row=names(app).index("alpha"))
        await pilot.press("delete")
        await until(pilot, lambda: on_screen(app, ConfirmScreen), what="the question")
        await pilot.press("n")  # kept
        await until(pilot, lambda: on_screen(app, SessionListScreen), what="the list")
        assert (data / "alpha.stream.jsonl").exists() and "alpha" in names(app)

        await pilot.press("delete")
        await until(pilot, lambda: on_screen(app, ConfirmScreen), what="the question")
        await pilot.press("y")
        await until(pilot, lambda: "alpha" not in names(app), what="the row to go")
        assert not (data / "alpha.stream.jsonl").exists()
        [entry] = list_trash(data)
        assert entry.name == "alpha" and (entry.path / "alpha.stream.jsonl").exists()
        assert notes(app)[-1] == (f"Deleted 'alpha': U here restores it (or later: channel "
                                  f"sessions restore {entry.entry}).")

        await pilot.press("u")
        await until(pilot, lambda: "alpha" in names(app), what="the row to return")
        assert (data / "alpha.stream.jsonl").read_bytes() == before
        assert list_trash(data) == [] and notes(app)[-1] == "Restored 'alpha'."
        await pilot.press("u")  # nothing more to undo
        assert "Nothing deleted here to restore" in notes(app)[-1]


async def test_search_filters_by_name_and_message_text_as_one_types(make_app):
    app = make_app(session="alpha")
    events = record_events(app)
    async with app.run_test(size=SIZE) as pilot:
        await two_sessions(pilot, app, events)
        await open_list(pilot, app)
        assert set(names(app)) == {"alpha", "beta"}
        await pilot.press("slash", *"TEAPOT")  # in alpha's message only
        await until(pilot, lambda: names(app) == ["alpha"], what="the message search")
        assert "teapots" in rows(app)[0][2]  # its matching message, around the match
        search = app.screen.query_one("#sessions-search")
        search.value = ""
        await until(pilot, lambda: set(names(app)) == {"alpha", "beta"}, what="all again")
        await pilot.press(*"bet")  # a name
        await until(pilot, lambda: names(app) == ["beta"], what="the name search")
        await pilot.press(*"zzz")
        await until(pilot, lambda: names(app) == [], what="no match")
        assert "No session matches." in str(app.screen.query_one("#sessions-empty").render())
        search.value = "alpha"
        await until(pilot, lambda: names(app) == ["alpha"], what="alpha")
        await pilot.press("enter")  # Enter in the search line opens the highlighted match
        opened = await booted(pilot, events, 3)
        assert opened["session"] == "alpha" and opened["kind"] == "warm"
