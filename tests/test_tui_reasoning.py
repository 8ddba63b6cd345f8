"""A thinking model's reasoning folded in the transcript (channel_tui/reasoning.py,
widgets/reasoning_fold.py): the split of a reply into reasoning and answer, and, on the fake
engine, the folded line, Enter and a click opening it, and a copy that leaves it out. The text
the app keeps stays the whole reply."""

from __future__ import annotations

from textual.widgets import Markdown, Static

from channel_tui.reasoning import copyable, split_reasoning, undecided
from channel_tui.widgets.message_widgets import AssistantMessage
from channel_tui.widgets.prompt import Prompt
from channel_tui.widgets.reasoning_fold import ReasoningFold

from .fake_engine import THINK, THINKING_REPLY
from .test_tui_snapshots import SIZE, booted, fake_app, until

WHOLE = "".join(THINKING_REPLY)


def test_a_reply_without_think_is_all_answer() -> None:
    parts = split_reasoning("Plain **answer**.")
    assert parts.reasoning is None and parts.answer == "Plain **answer**."
    assert not parts.still_thinking and parts.words == 0
    assert copyable("Plain **answer**.") == "Plain **answer**."


def test_reasoning_then_answer() -> None:
    parts = split_reasoning("\n <think>\nLet me see: two words.\n</think>\n\nThe answer.")
    assert parts.reasoning == "Let me see: two words." and parts.words == 5
    assert parts.answer == "The answer." and not parts.still_thinking


def test_text_before_think_is_not_reasoning() -> None:
    text = "Models write <think>…</think> first."
    parts = split_reasoning(text)
    assert parts.reasoning is None and parts.answer == text
    assert copyable(text) == text


def test_an_unclosed_tag_is_still_thinking() -> None:
    parts = split_reasoning("<think>Hmm, the user")
    assert parts.reasoning == "Hmm, the user" and parts.answer == ""
    assert parts.still_thinking and parts.words == 3
    # Cut off while thinking: a copy takes the reasoning, there being nothing else.
    assert copyable("<think>Hmm, the user") == "Hmm, the user"


def test_empty_reasoning() -> None:
    parts = split_reasoning("<think>\n\n</think>\n\nHi!")
    assert parts.reasoning == "" and parts.answer == "Hi!" and not parts.still_thinking
    assert copyable("<think>\n\n</think>\n\nHi!") == "Hi!"
    assert split_reasoning("<think>").reasoning == "" and split_reasoning("<think>").still_thinking


def test_a_closing_tag_split_across_pieces() -> None:
    # '</th' is held out of the reasoning (it is the start of the tag), then closes it.
    first = split_reasoning("<think>one two</th")
    assert first.reasoning == "one two" and first.still_thinking and first.answer == ""
    assert split_reasoning("<think>one two<").reasoning == "one two"
    done = split_reasoning("<think>one two</th" + "ink>answer")
    assert done.reasoning == "one two" and done.answer == "answer" and not done.still_thinking


def test_undecided_while_the_opening_tag_streams() -> None:
    assert undecided("") and undecided("  \n") and undecided("<th") and undecided(" <think")
    assert not undecided("<think>") and not undecided("Hi") and not undecided("<b>")


def fold_line(reply: AssistantMessage) -> str:
    return str(reply.query_one(ReasoningFold).query_one(".fold-line", Static).render())


async def test_a_thinking_reply_is_folded_and_opens(tmp_path) -> None:
    app = fake_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        chat = app.chat
        chat.query_one(Prompt).load_text(f"{THINK} say it short")
        await pilot.press("enter")
        await until(pilot, lambda: len(chat.messages) == 5 and chat.current is None)
        await pilot.pause(0.2)
        reply = chat.query(AssistantMessage).last()
        # The app keeps (and would export) the whole reply; only the drawing folds it.
        assert reply.text == WHOLE and chat.messages[-1].content == WHOLE
        assert fold_line(reply) == "▸ Thought for 6 words"
        assert reply.query_one(Markdown).source == "The ring stays **warm**."
        body = reply.query_one(".fold-body", Static)
        assert body.region.height == 0  # folded: the reasoning takes no room

        await pilot.press("up")  # the newest message: this reply
        assert app.focused is reply
        await pilot.press("enter")
        await pilot.pause(0.1)
        fold = reply.query_one(ReasoningFold)
        assert fold.opened and fold_line(reply) == "▾ Thought for 6 words"
        assert str(body.render()) == "The user wants one short line."
        assert body.region.height > 0
        await pilot.press("c")  # the copy is the answer, not the reasoning
        await pilot.pause(0.1)
        assert app.clipboard == "The ring stays **warm**."
        await pilot.press("enter")
        await pilot.pause(0.1)
        assert not fold.opened and body.region.height == 0
        await pilot.click(ReasoningFold)  # a click opens it as well
        await pilot.pause(0.1)
        assert fold.opened

        await pilot.press("escape", "ctrl+t")  # the last reply: its answer too
        await pilot.pause(0.1)
        assert app.clipboard == "The ring stays **warm**."


async def test_the_fold_counts_while_the_reply_streams(tmp_path) -> None:
    app = fake_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        reply = await app.chat.transcript.add_assistant()
        await reply.append(" <th")  # nothing drawn until it is known to be reasoning
        assert not reply.query(ReasoningFold)
        await reply.append("ink>")
        await pilot.pause(0.05)
        assert fold_line(reply) == "▸ Thinking… (0 words)"
        for piece in ("one two", " three</th"):
            await reply.append(piece)
        await pilot.pause(0.05)
        assert fold_line(reply) == "▸ Thinking… (3 words)"  # '</th' is no word of it
        assert reply.query_one(Markdown).source == ""  # no answer yet
        for piece in ("ink>\n\n", "Answer"):
            await reply.append(piece)
        await pilot.pause(0.05)
        assert fold_line(reply) == "▸ Thought for 3 words"
        await reply.finish("eot", "", reply.text)
        await pilot.pause(0.05)
        assert reply.query_one(Markdown).source == "Answer"
        assert reply.text == " <think>one two three</think>\n\nAnswer"
        # An empty reasoning (a thinking model told not to think) leaves no fold at all.
        empty = await app.chat.transcript.add_assistant()
        for piece in ("<think>", "\n\n</think>", "\n\nHi"):
            await empty.append(piece)
        await empty.finish("eot")
        await pilot.pause(0.05)
        assert not empty.query(ReasoningFold) and empty.query_one(Markdown).source == "Hi"
