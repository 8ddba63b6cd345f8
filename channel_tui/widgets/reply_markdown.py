"""A reply's Markdown as the model wrote it: its line breaks kept (a haiku stays three lines),
and each code block labelled with its language and copied by a click."""

from __future__ import annotations

from markdown_it import MarkdownIt
from textual import events
from textual.widgets import Markdown
from textual.widgets.markdown import MarkdownFence

from ..messages import CopyRequested


def _line_breaks(state) -> None:
    """A single newline is a line break, as in the chat apps people know: CommonMark's soft
    break joins the lines into one (Textual draws it as a space)."""
    for token in state.tokens:
        for child in token.children or ():
            if child.type == "softbreak":
                child.type = "hardbreak"


def reply_parser() -> MarkdownIt:
    parser = MarkdownIt("gfm-like")
    parser.core.ruler.push("line_breaks", _line_breaks)
    return parser


class CodeBlock(MarkdownFence):
    """A fenced code block: its language on the border, a click copies the code."""

    def on_mount(self) -> None:
        self.border_title = self.lexer or "code"
        self.border_subtitle = "click to copy"
        self.tooltip = "Click to copy this code"

    def on_click(self, event: events.Click) -> None:
        event.stop()
        self.post_message(CopyRequested(self.code.rstrip("\n"),
                                        f"the {self.lexer or 'code'} block"))


class ReplyMarkdown(Markdown):
    BLOCKS = {**Markdown.BLOCKS, "fence": CodeBlock, "code_block": CodeBlock}

    def __init__(self, markdown: str = "", *, classes: str | None = None) -> None:
        super().__init__(markdown, classes=classes, parser_factory=reply_parser)
