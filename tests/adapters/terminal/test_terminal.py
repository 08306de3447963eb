"""The terminal: the rich card sink (paced by the real CardStreamer) and ``botgateway chat`` in a pty."""

from __future__ import annotations

import fcntl
import io
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from adapters.terminal import TerminalSink, card_renderable
from botgateway.budget import RateBudget
from botgateway.cards.buffer_policy import BufferPolicy
from botgateway.cards.state import CardState
from botgateway.cards.streamer import CardStreamer, StreamerTiming
from botgateway.config import BufferPolicyConfig, PhasePolicy
from botgateway.events import AnswerDelta, RoundStarted, ToolCallFinished, ToolCallStarted, TurnDone, TurnResult
from botgateway.sink import CardGone, CardHandle, CardTarget
from botgateway.snapshot import CardSnapshot, ToolLine
from tests.paths import REPO

ROOT = REPO
ANSI = re.compile(rb"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07]*\x07|[()][A-Z0-9]|[=>78])")


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=100, force_terminal=False, color_system=None), out


def _text(console: Console, snapshot: CardSnapshot) -> str:
    with console.capture() as capture:
        console.print(card_renderable(snapshot))
    return capture.get()


def test_card_renders_tool_lines_thought_cursor_and_footer() -> None:
    console, _ = _console()
    working = CardSnapshot(
        status="streaming",
        blocks=(
            ToolLine("c1", "find_server", "query=10.0.1.100", "done", 1.2, "1 instance found"),
            ToolLine("c2", "search_ec2_by_ip", "ip=10.0.1.100", "failed", 0.4, "permission denied"),
            ToolLine("c3", "list_servers", "", "running"),
        ),
        answer="**10.0.1.100** is prod-db-01",
        footer="round 2/6 · 1.5 s · demo model",
    )
    text = _text(console, working)
    assert "✅ find_server · 1.2 s · 1 instance found" in text
    assert "❌ search_ec2_by_ip" in text and "permission denied" in text
    assert "🔧 list_servers" in text
    assert "10.0.1.100 is prod-db-01▌" in text  # Markdown rendered, cursor while streaming
    assert "demo model" in text
    thinking = _text(console, CardSnapshot(status="working", thought="Let me look that up"))
    assert "💭 Let me look that up" in thinking
    done = _text(console, CardSnapshot(status="done", answer="all good"))
    assert "all good" in done and "▌" not in done
    stopped = _text(console, CardSnapshot(status="stopped", answer="part", error="⏹ Stopped."))
    assert "⏹ Stopped." in stopped
    queued = _text(console, CardSnapshot(status="queued", queue_position=2, locale="zh-CN"))
    assert "第 2 位" in queued


def test_the_preamble_comes_first_above_a_rule_and_alone_on_a_card_that_has_nothing_else() -> None:
    console, _ = _console()
    alert = "🔥 **FIRING** · critical\n\n- HighCPU on 10.0.1.100 ![g](http://evil.example/x?d=1)"
    live = CardSnapshot(status="streaming", preamble=alert, asker="alice", answer="prod-db-01",
                        blocks=(ToolLine("c1", "find_server", "query=10.0.1.100", "done", 1.2, "1 instance found"),))
    lines = _text(console, live).splitlines()

    def first(predicate: Callable[[str], bool]) -> int:
        return next(i for i, line in enumerate(lines) if predicate(line))

    def is_rule(line: str) -> bool:  # a line of the panel holding only the rule
        inner = line.strip("│ ")
        return len(inner) > 20 and set(inner) == {"─"}

    rule = first(is_rule)
    assert first(lambda line: "FIRING" in line) < rule < first(lambda line: "alice" in line) < first(
        lambda line: "find_server" in line)
    text = "\n".join(lines)
    assert "http://evil.example/x?d=1" in text and "![g]" not in text
    lines = _text(console, CardSnapshot(status="done", preamble=alert)).splitlines()
    alone = "\n".join(lines)
    assert "FIRING" in alone and "HighCPU" in alone
    assert "Thinking" not in alone and "▌" not in alone and not any(is_rule(line) for line in lines)


async def test_terminal_sink_is_paced_by_the_buffer_policy_and_prints_the_final_card() -> None:
    console, out = _console()
    sink = TerminalSink(console)
    policy = BufferPolicy.from_config(
        BufferPolicyConfig(answer=PhasePolicy(min_chars=20, min_interval_s=0.05, max_wait_s=0.2))
    )
    state = CardState(model_label="demo model")
    target = CardTarget(platform="terminal", chat_id="chat", turn_id="t1")
    streamer = CardStreamer(sink, target, policy=policy, budget=RateBudget(), state=state, timing=StreamerTiming(final_deadline_s=5))
    await streamer.start()
    await streamer.feed(RoundStarted(round=1, max_rounds=4))
    await streamer.feed(ToolCallStarted(call_id="c1", name="find_server", arguments={"query": "db"}))
    await streamer.feed(ToolCallFinished(call_id="c1", name="find_server", ok=True, summary="1 instance found", duration_s=0.01))
    await streamer.feed(RoundStarted(round=2, max_rounds=4))
    answer = "".join(f"word{i} " for i in range(300))
    for i in range(0, len(answer), 3):
        await streamer.feed(AnswerDelta(text=answer[i : i + 3]))
    await streamer.feed(TurnDone(result=TurnResult(answer=answer, rounds=2)))
    metrics = await streamer.finish()
    chunks = len(range(0, len(answer), 3))
    # the same policy as a chat platform: far fewer draws than chunks
    assert sink.updates < chunks / 4
    assert metrics.delivered
    printed = out.getvalue()
    assert "word0" in printed and "word299" in printed  # the full final answer is in the scrollback
    assert "✅ find_server" in printed
    assert "▌" not in printed.split("╭")[-1]  # the final card has no cursor


async def test_terminal_sink_reports_unknown_cards_as_gone_and_prints_fallbacks() -> None:
    console, out = _console()
    sink = TerminalSink(console)
    target = CardTarget(platform="terminal", chat_id="chat")
    with pytest.raises(CardGone):
        await sink.update(CardHandle("nope", target), CardSnapshot(status="working"))
    with pytest.raises(CardGone):
        await sink.finalize(CardHandle("nope", target), CardSnapshot(status="done"))
    await sink.fallback(target, CardSnapshot(status="failed", error="Sorry, I can't answer this: no access"))
    assert "no access" in out.getvalue()


# --- botgateway chat in a real pseudo-terminal ------------------------------------------


class Pty:
    """A child process on a pseudo-terminal it controls (so Ctrl-C is a real SIGINT)."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 110, 0, 0))

        def controlling_tty() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "SLACK_", "DINGTALK_"))}
        env.update(TERM="xterm-256color", COLUMNS="110", LINES="40", PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            args, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, preexec_fn=controlling_tty, close_fds=True
        )
        os.close(slave)
        self.fd = master
        self.raw = b""
        self.mark = 0
        """Position in the ANSI-stripped output after the last match."""

    def text(self, start: int = 0) -> str:
        return ANSI.sub(b"", self.raw[start:]).decode("utf-8", "replace")

    def expect(self, pattern: str, timeout: float = 20.0) -> str:
        """Wait until ``pattern`` appears in output after the last match; returns the text up to it."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while True:
            text = self.text()
            found = regex.search(text, self.mark)
            if found:
                seen = text[self.mark : found.end()]
                self.mark = found.end()
                return seen
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (self.proc.poll() is not None and not self._pump(0)):
                raise AssertionError(f"{pattern!r} not seen; output so far:\n{self.text()[-3000:]}")
            self._pump(min(remaining, 0.2))

    def _pump(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:
            return False
        self.raw += data
        return bool(data)

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(5)
        os.close(self.fd)


@pytest.fixture
def chat_config(tmp_path: Path) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(
        "llm: {provider: demo}\n"
        f"log: {{file: {tmp_path / 'bg.log'}}}\n"
        f"memory: {{sqlite_path: {tmp_path / 'bg.db'}}}\n"
        f"tools: {{inventory: {{path: {ROOT / 'tools' / 'sample_inventory.yaml'}}}}}\n"
    )
    return config


def test_chat_in_a_terminal_streams_tool_lines_and_answer_and_ctrl_c_stops_only_the_turn(tmp_path: Path, chat_config: Path) -> None:
    term = Pty([sys.executable, "-m", "botgateway.cli", "chat", "-c", str(chat_config)], cwd=tmp_path)
    try:
        term.expect(r"demo model")  # the banner names the model
        term.expect(r"you ›")
        term.send(b"which server is 10.0.1.100?\r")
        streamed = term.expect(r"Rocky Linux")  # part of the answer, while it is still streaming
        assert "find_server" in streamed
        assert "▌" in streamed  # the live card shows the cursor while typing
        final = term.expect(r"you ›")
        assert "✅ find_server" in final and "1 instance found" in final
        assert "prod-db-01" in final and "demo model" in final

        # Ctrl-C while answering stops the turn, not the chat
        term.send(b"hello, what can you do?\r")
        term.expect(r"offline stand-in")
        term.send(b"\x03")
        stopped = term.expect(r"you ›")
        assert "Stopped" in stopped
        assert term.proc.poll() is None

        term.send(b"/help\r")
        assert "/clear" in term.expect(r"you ›")
        term.send(b"\x04")  # Ctrl-D at the prompt quits
        assert term.proc.wait(15) == 0
    finally:
        term.close()
    log = (tmp_path / "bg.log").read_text()
    assert '"outcome": "stopped"' in log and '"outcome": "done"' in log


def _exit_code(term: Pty, timeout: float = 30.0) -> int:
    """Wait for the process to exit while reading its terminal (a full terminal would block its writes)."""
    deadline = time.monotonic() + timeout
    while term.proc.poll() is None and time.monotonic() < deadline:
        term._pump(0.2)
    term._pump(0.2)
    return term.proc.wait(1)


def test_run_with_the_terminal_chat_drains_on_sigterm(tmp_path: Path, chat_config: Path) -> None:
    term = Pty([sys.executable, "-m", "botgateway.cli", "run", "-c", str(chat_config)], cwd=tmp_path)
    try:
        term.expect(r"you ›")
        term.send(b"hello, what can you do?\r")
        term.expect(r"offline stand-in")  # the answer is streaming
        term.proc.send_signal(signal.SIGTERM)
        assert _exit_code(term) == 0
        assert "restarting" not in term.text()  # the running answer was let finish
    finally:
        term.close()
    log = (tmp_path / "bg.log").read_text()
    assert '"outcome": "done"' in log and "gateway.drained" in log and "botgateway.stopped" in log


def test_run_without_a_terminal_and_no_other_adapter_says_why_it_cannot_run(tmp_path: Path, chat_config: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "botgateway.cli", "run", "-c", str(chat_config)],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert "needs a terminal" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_chat_that_cannot_start_says_why_without_a_traceback(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the store's folder should be")
    config.write_text(f"llm: {{provider: demo}}\nlog: {{file: {tmp_path / 'bg.log'}}}\nmemory: {{sqlite_path: {blocker / 'db.sqlite'}}}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "botgateway.cli", "chat", "-c", str(config)],
        cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 1
    assert "could not start" in proc.stderr and "sqlite_path" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
