"""The README tells the truth: its topic table is the topic registry's, and every shell example in
it and in the benchmarks' READMEs is either run here or marked with what it needs.

The marker convention: a fenced code block whose first line is a comment ``# needs: <what>``
(a running stack, a Kubernetes cluster, minutes of CPU ...) is one a reader runs by hand; every
other ``bash``/``sh``/``shell`` block is run here line by line (a line ending in ``\\`` continues
on the next one; ``#`` starts a comment) with ``bash`` in the repository, ``.venv/bin`` first on
PATH, and must exit 0. A fenced block without a language whose lines read like commands must say
``bash``, so that no shell example escapes the rule. Python blocks are held to the same marker.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from berth.schemas.topics import ALL_TOPICS, Topic

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "bench").glob("*/README.md"))]
SHELL = ("bash", "sh", "shell", "console")
MARKER = re.compile(r"#\s*needs:\s*\S")
COMMAND_WORDS = (
    "make ",
    "berth ",
    "python ",
    "python3 ",
    ".venv/",
    "kubectl ",
    "helm ",
    "docker ",
    "export ",
    "cat ",
    "pip ",
)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    language: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def marked(self) -> bool:
        first = self.text.lstrip("\n").splitlines()[0] if self.text.strip() else ""
        return MARKER.match(first) is not None

    def commands(self) -> list[str]:
        commands, current = [], ""
        for raw in self.text.splitlines():
            line = raw.rstrip()
            if not current and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.endswith("\\"):
                current += line[:-1] + " "
                continue
            commands.append(current + line)
            current = ""
        return commands


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"^```(\w*)[^\n]*\n(.*?)^```", text, re.M | re.S):
        found.append(Block(path, text[: match.start()].count("\n") + 1, match.group(1), match.group(2)))
    return found


# What a test cannot run: a stack, a cluster, a network, minutes of CPU, or a change to the tree.
CANNOT = re.compile(
    r"(^|\s|/)(make|kubectl|helm|docker|export|curl)\s|\bberth (dev|demo|audit|tail|publish|"
    r"topics create|db|replay|schemas export|[a-z-]+ run)\b|python -m bench\b|\s&\s*$"
)
ALL_BLOCKS = [block for path in DOCS for block in blocks(path)]
RUNNABLE = [block for block in ALL_BLOCKS if block.language in SHELL and not block.marked]


# --- the topic table -----------------------------------------------------------------------------


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def readme_topic_rows() -> dict[str, list[str]]:
    """The topic table's rows by topic name: the cells after the name."""
    rows: dict[str, list[str]] = {}
    for line in _section(README.read_text(encoding="utf-8"), "Topics and events").splitlines():
        match = re.match(r"\|\s*`([^`]+)`\s*\|(.*)\|\s*$", line)
        if match:
            rows[match.group(1)] = [cell.strip() for cell in match.group(2).split("|")]
    return rows


def registry_cells(topic: Topic) -> list[str]:
    """What the registry says about a topic, as the table's key, partitions and events cells."""
    events = ", ".join(f"`{name.removeprefix('io.berth.')}`" for name in topic.event_types)
    partitions = f"{topic.partitions}{', compacted' if topic.compacted else ''}"
    return [topic.key, partitions, events]


def expected_topic_table(carries: dict[str, str]) -> str:
    lines = ["| topic | key | partitions | events (`io.berth.` …) | carries |", "|---|---|---|---|---|"]
    for topic in ALL_TOPICS:
        cells = [*registry_cells(topic), carries.get(topic.name) or topic.description]
        lines.append(f"| `{topic.name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def test_the_topic_table_is_the_registry():
    rows = readme_topic_rows()
    carries = {name: cells[-1] for name, cells in rows.items() if cells}
    expected = expected_topic_table(carries)
    hint = f"README.md's topic table differs from schemas/topics.py ALL_TOPICS; the table should read:\n\n{expected}\n"
    assert list(rows) == [topic.name for topic in ALL_TOPICS], hint
    for topic in ALL_TOPICS:
        assert rows[topic.name][:3] == registry_cells(topic), hint
        assert len(rows[topic.name]) == 4 and rows[topic.name][3], f"{topic.name}: say what it carries\n" + hint


def test_the_readme_names_the_label_berth_reads():
    from berth.schemas.cells import NODE_POOL_LABEL

    text = README.read_text(encoding="utf-8")
    assert re.search(r"--label node-pool=", text) is None, f"Berth reads {NODE_POOL_LABEL}, not node-pool"
    assert f"--label {NODE_POOL_LABEL}=" in text


# --- the shell examples --------------------------------------------------------------------------


def test_every_code_block_is_run_here_or_says_what_it_needs():
    unlabeled = [
        block.where
        for block in ALL_BLOCKS
        if not block.language and any(command.lstrip().startswith(COMMAND_WORDS) for command in block.commands())
    ]
    assert not unlabeled, f"shell examples without a language (mark them ```bash): {unlabeled}"
    python = [block.where for block in ALL_BLOCKS if block.language == "python" and not block.marked]
    assert not python, f"Python examples are not run here: start them with '# needs: ...': {python}"
    for block in RUNNABLE:
        for command in block.commands():
            assert not CANNOT.search(command), (
                f"{block.where}: {command!r} cannot run in a test: mark the block with '# needs: ...' "
                "on its first line, or move the command to a marked block"
            )
    assert RUNNABLE, "the README has examples that run without services"


@pytest.mark.parametrize("block", RUNNABLE, ids=[block.where for block in RUNNABLE])
def test_runnable_examples_exit_0(block: Block):
    # Only commands that start nothing run here: an unmarked expensive block fails, unrun.
    for command in block.commands():
        if CANNOT.search(command) or not command.lstrip().startswith(("berth ", "cat ", "python -m berth")):
            pytest.fail(f"{block.where}: {command!r} is not run by the tests: mark the block '# needs: ...'")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for command in block.commands():
        result = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, f"{block.where}: {command}\n{result.stderr[-2000:]}"
