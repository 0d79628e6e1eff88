"""The documentation says what the code does: every profile, input line, flag, outcome, exit code and the
accounting identity in docs/ is checked against the code here (fast, no server).

Markers (``tests/docs_blocks.py`` lists them all; any other HTML comment on a page fails): an HTML comment
on the line right before a fenced block, a table or a line (invisible on the site):

- ``<!-- fragment -->`` before a ```toml block: a piece of a profile shown for its shape, not checked as a
  whole profile. Every other ```toml block must pass ``thread-client profile check``.
- ```jsonl blocks are input lines: each must read as a request; ``<!-- invalid-input -->`` before one says
  each of its lines must be refused as ``invalid_input`` instead. ```json blocks must be JSON;
  ``<!-- record -->`` before one: a results record, with the fields of a real run's records.
- Every ```bash block is marked: ``<!-- run -->`` runs it against the reference server
  (``tests/integration/test_docs_run.py``); ``<!-- no-run: REASON -->`` says why it cannot run there.
- ``<!-- output -->`` before a ```text block: what the page's last ``run`` block before it prints, compared
  line by line with a real run; ``<!-- copy-of: PAGE -->``: the same text as a ```text block of PAGE.
- ``<!-- outcomes -->``, ``<!-- exit-code-table -->``, ``<!-- identity -->``: the table or line that follows
  is pinned to ``FinalOutcome``, ``thread_client.exits`` and the summary's identity line.

A small collector of our own (``tests/docs_blocks.py``) rather than pytest-examples or pytest-markdown-docs:
both run Python code blocks, and these blocks are TOML profiles, JSON lines and shell commands that need a
server on a free port, a private work folder and the port put into the command.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import re

import pytest
from mkdocs.__main__ import build_command

import tools.chaos
import tools.order_model
from docs_blocks import DOCS, MARKERS, ROOT, Block, blocks, markers
from thread_client import cli, exits
from thread_client.flow.queues import QueueCounts
from thread_client.profile import load_profile
from thread_client.profile.command import profile_main
from thread_client.profile.endpoints import Endpoints
from thread_client.profile.reader import _TABLES
from thread_client.request import FinalOutcome, InvalidInput, Work, parse_line

# The hook file MkDocs loads by path (docs/ is no package): the test reads the pages the build makes.
_spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hooks)

TOML = [block for block in blocks("toml") if block.marker != "fragment"]
JSONL = blocks("jsonl")


def _after_marker(page: str, marker: str) -> list[str]:
    """The lines of the table or line that follows ``<!-- marker -->`` on a page, up to the next blank line."""
    lines = (DOCS / page).read_text().splitlines()
    start = lines.index(f"<!-- {marker} -->") + 1
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return lines[start:end]


def _first_column(table: list[str]) -> set[str]:
    rows = [line for line in table[2:] if line.startswith("|")]  # past the header and its rule
    return {row.split("|")[1].strip().strip("`") for row in rows}


def test_every_comment_on_a_page_is_a_known_marker_on_a_line_of_its_own():
    """A typo (``<!-- runs -->``) would otherwise silently stop what the marker asks for."""
    assert not [str(marker) for marker in markers() if not marker.name]


def test_every_marker_stands_before_what_it_marks():
    for marker in [marker for marker in markers() if marker.name]:  # the others fail the test above
        lines = (ROOT / marker.page).read_text().splitlines()
        following = lines[marker.line] if marker.line < len(lines) else ""
        kind = MARKERS[marker.name]
        if kind == "table":
            assert following.startswith("|"), marker
        elif kind == "line":
            assert following.strip() and not following.startswith("```"), marker
        elif kind != "generated":
            assert following == f"```{kind}", f"{marker}: <!-- {marker.name} --> stands before ```{kind} blocks"


def test_every_shell_block_runs_or_says_why_it_cannot():
    unmarked = [str(block) for block in blocks("bash")
                if not (block.marker == "run" or block.marker == "no-run" and block.argument)]
    assert not unmarked, f"mark each <!-- run --> or <!-- no-run: why -->: {unmarked}"


def test_a_copy_is_the_same_text_as_its_original():
    copies = [block for block in blocks() if block.marker == "copy-of"]
    assert copies
    for copy in copies:
        originals = [block.text for block in blocks(copy.lang) if block.page == copy.argument]
        assert copy.text in originals, f"{copy} is no copy of a ```{copy.lang} block of {copy.argument}"


def test_the_collector_finds_the_examples():
    assert len(TOML) >= 10 and len(JSONL) >= 2
    assert {block.included.name for block in TOML if block.included} >= {
        "reference.toml", "signed-post-json.toml", "binance-spot-like.toml", "kraken-like.toml", "okx-like.toml",
        "bybit-like.toml", "coinbase-advanced-like.toml", "github-like.toml"}


@pytest.mark.parametrize("block", TOML, ids=str)
def test_every_toml_block_is_a_profile_the_check_accepts(block: Block, tmp_path, capsys):
    path = block.included or tmp_path / "block.toml"
    if not block.included:
        path.write_text(block.text)
    assert profile_main(["check", str(path)], "thread-client") == 0, capsys.readouterr().err


def test_the_five_line_profile_is_five_lines_and_the_one_the_page_tries():
    [five] = [block for block in TOML if block.page == "docs/api/index.md"]
    assert len(five.text.strip().splitlines()) == 5
    assert any(five.text in block.text for block in blocks("bash") if block.page == five.page and block.marker == "run")


@pytest.mark.parametrize("block", JSONL, ids=str)
def test_every_input_line_block_reads_as_the_docs_say(block: Block):
    expected = InvalidInput if block.marker == "invalid-input" else Work
    reference = load_profile()
    # A refused line is refused as the daemon reads it under the reference profile (a nested value: its params
    # go in the query string); the others are requests under some profile (their endpoints, a JSON body).
    admit = (Endpoints(reference.request, reference.limits, reference.own_params).admit if expected is InvalidInput
             else None)
    for number, line in enumerate(block.text.strip().splitlines(), 1):
        item = parse_line(line, f"line {number}", admit=admit)
        assert isinstance(item, expected), (line, item)


@pytest.mark.parametrize("block", blocks("json"), ids=str)
def test_every_json_block_is_json(block: Block):
    json.loads(block.text)


def test_every_profile_field_is_on_its_table_s_page():
    for table, fields in _TABLES.items():
        if not table:
            continue  # name and description: on the profiles page
        page = (DOCS / "api" / f"{table.split('.')[0]}.md").read_text()
        missing = [field for field in fields if f"`{field}`" not in page]
        assert not missing, f"api/{table.split('.')[0]}.md does not name {missing}"


def _parsers() -> list[argparse.ArgumentParser]:
    """The parser of every command and sub-command, as each ``--help`` builds it."""
    seen = []
    parse = argparse.ArgumentParser.parse_known_args

    def spy(parser, *args, **kwargs):
        seen.append(parser)
        return parse(parser, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_known_args", spy)
        for command in ["", *cli._SUBCOMMANDS, "profile list", "profile show", "profile check"]:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
                cli.main([*command.split(), "--help"])
    return seen


def test_every_argument_of_every_command_has_its_help():
    """The reference page is the parsers' help: a flag added without help would be documented by its name only."""
    parsers = _parsers()
    assert {"thread-client", "thread-client submit", "thread-client profile check"} <= {p.prog for p in parsers}
    silent = []
    for parser in parsers:
        for action in parser._actions:
            # a sub-command's help is on its choice (what `profile --help` lists), not on the action holding them
            described = action._choices_actions if isinstance(action, argparse._SubParsersAction) else [action]
            silent += [(parser.prog, item.dest) for item in described if item.help in (None, "", argparse.SUPPRESS)]
    assert not silent

def _flags(help_text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", help_text))


def test_every_flag_of_every_command_is_in_the_generated_cli_reference():
    page = (DOCS / "reference" / "cli.md").read_text()
    generated = hooks.on_page_markdown(page)
    commands = ["", *cli._SUBCOMMANDS, *(f"profile {verb}" for verb in ("list", "show", "check"))]
    for command in commands:
        assert f"<!-- cli-help: {command} --help -->".replace(":  ", ": ") in page
        flags = _flags(hooks.cli_help(f"{command} --help"))
        assert flags and flags <= _flags(generated), (command, flags - _flags(generated))
    verbs = re.search(r"\{([a-z,]+)\}", hooks.cli_help("profile --help")).group(1).split(",")
    assert verbs == ["list", "show", "check"]


def _tool_help(main) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(["--help"])
    return out.getvalue()


#: Flags the pages name that belong to other tools, with the tool's own flags.
OTHER_TOOLS_FLAGS = {
    "--only": lambda: _flags(_tool_help(tools.chaos.main)),  # python -m tools.chaos --only TEXT
    "--max-latency-ms": lambda: _flags(_tool_help(tools.order_model.main)),  # python -m tools.order_model
    "--strict": lambda: {option for param in build_command.params for option in param.opts},  # mkdocs build
}


def test_the_other_tools_flags_the_pages_name_are_those_tools_own():
    assert not [flag for flag, tool_flags in OTHER_TOOLS_FLAGS.items() if flag not in tool_flags()]


def test_every_flag_the_pages_name_exists():
    """A flag renamed or removed from the daemon, its sub-commands or the reference server fails here."""
    known = _flags(hooks.server_help()) | set(OTHER_TOOLS_FLAGS)
    for command in ["", *cli._SUBCOMMANDS, "profile list", "profile show", "profile check"]:
        known |= _flags(hooks.cli_help(f"{command} --help"))
    for path in [*DOCS.rglob("*.md"), ROOT / "README.md"]:
        unknown = _flags(path.read_text()) - known
        assert not unknown, f"{path.name} names {sorted(unknown)}"


def test_the_outcomes_page_lists_every_outcome_and_nothing_else():
    assert _first_column(_after_marker("reference/outcomes.md", "outcomes")) == {o.value for o in FinalOutcome}


def test_the_exit_codes_page_lists_every_code_and_nothing_else():
    listed = {int(code) for code in _first_column(_after_marker("reference/exit-codes.md", "exit-code-table"))}
    bad_arguments = 2  # argparse's, and a bad setting's (cli.main)
    assert listed == {0, bad_arguments, *(reason.exit_code for reason in exits.StopReason)}
    generated = hooks.exit_codes_table()
    failing = [reason for reason in exits.StopReason if reason.exit_code]
    assert all(f"| {reason.value} |" in generated for reason in failing) and exits.EXIT_HELP in generated


def test_the_identity_in_the_docs_is_the_summary_s_own_line():
    every_term = QueueCounts(created=28, accepted=1, graveyard=2, main_queue=3, dlq=4, in_flight=5,
                             left_for_next_run=6, taken_over=7)
    summary_line = re.sub(r" \d+", "", every_term.identity())
    [documented] = _after_marker("work/stops.md", "identity")
    assert documented.strip("`") == summary_line
    # an identity written anywhere else is this one, or a summary's real output
    for path in [*DOCS.rglob("*.md"), ROOT / "README.md"]:
        for stated in re.findall(r"created == [^`\n]*", path.read_text()):
            assert stated == summary_line, path


def test_the_site_config_fetches_nothing_from_the_network():
    """Offline: no analytics, no link to a hosted repository (Material fetches its stars), no mermaid
    (Material loads it from a CDN), no URL at all."""
    config = (ROOT / "mkdocs.yml").read_text()
    assert not re.findall(r"analytics|repo_url|custom_fences|mermaid|https?://", config)


def test_the_architecture_s_layout_names_every_module():
    """A module added without a line in the layout would be a part of the daemon nobody is told about."""
    page = (DOCS / "how" / "architecture.md").read_text()
    layout = page[page.index("## Layout"):]
    modules = [path for path in (ROOT / "thread_client").rglob("*.py") if path.name != "__init__.py"]
    assert len(modules) > 40
    assert not [str(path.relative_to(ROOT)) for path in modules if path.name not in layout]
    packages = [path.parent.name for path in (ROOT / "tools").glob("*/__init__.py")]
    assert not [name for name in packages if f"{name}/" not in layout]
