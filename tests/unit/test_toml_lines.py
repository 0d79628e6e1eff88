"""``profile check`` names the line of a wrong value however the TOML writes it: dotted keys, inline tables,
inline arrays over several lines, sub-tables, the Nth of an array of tables, and text that only looks like a
header or a key (inside a string, a comment, an array)."""

from __future__ import annotations

import pytest

from thread_client.profile.command import profile_main
from thread_client.toml_text import LineFinder

_LIMIT = 'algorithm = "rolling-window"\nlimit = 5\nperiod_ms = 1000\n'

# Each profile, the line its one error must name, and words of the message.
SYNTAXES = [
    pytest.param('name = "x"\n\nanswers.message = 5\n', 3, "message must be a string", id="dotted key at the top"),
    pytest.param('name = "x"\nnonce.style = "random"\n', 2, "style must be one of", id="dotted key to a table"),
    pytest.param('[request]\nmethod = "GET"\nheaders."X-A" = "x\\ny"\n', 3, "Latin-1 text on one line",
                 id="dotted key in a table"),
    pytest.param('name = "x"\nrequest = { method = "GET", path = "api" }\n', 2, "path must start with /",
                 id="inline table"),
    pytest.param('[request]\nheaders = { Accept = "a", "X é" = "b" }\n', 2, "a name must be an HTTP token",
                 id="inline table of headers"),
    pytest.param('[request]\nendpoints = [\n  "GET /a",  # fine\n  "TRACE /b",\n]\n', 4,
                 'endpoints must each be "METHOD /path"', id="inline array over lines"),
    pytest.param('[answers]\nrule = [\n  { status = [200, 299], outcome = "accepted" },\n'
                 '  { status = 700, outcome = "retry" },\n]\n', 4, "status must be an HTTP status",
                 id="inline array of tables"),
    pytest.param('[request]\nmethod = "GET"\n\n[request.headers]\nAccept = "x"\n"X é" = "y"\n', 6,
                 "a name must be an HTTP token", id="sub-table"),
    pytest.param(f'[[limit]]\nname = "a"\n{_LIMIT}\n[[limit]]\nname = "b"\n{_LIMIT}\n[[limit]]\nname = "c"\n'
                 'algorithm = "rolling-window"\nlimit = "5"\nperiod_ms = 1000\n', 16, "limit must be an integer",
                 id="the third of an array of tables"),
    pytest.param(f'[[limit]]\nname = "a"\n{_LIMIT}\n[[limit]]\nname = "b"\n{_LIMIT}\n[limit.cost]\n'
                 '"GET /api/request" = 1\n"POST /api/order" = 2\n', 15, "cost names POST /api/order",
                 id="sub-table of the second of an array of tables"),
    pytest.param('description = """\n[[limit]]\nlimit = "x"\n"""  # [[limit]]\n[[limit]]\n'
                 f'name = "a"\n{_LIMIT}[[limit]]\nname = "b"\nalgorithm = "leaky"\n', 12, "algorithm must be one of",
                 id="headers inside a string and a comment"),
]


@pytest.mark.parametrize("text, line, words", SYNTAXES)
def test_profile_check_names_the_line_of_a_wrong_value_in_every_syntax(tmp_path, capsys, text, line, words):
    path = tmp_path / "profile.toml"
    path.write_text(text)
    assert profile_main(["check", str(path)], "thread-client") == 2
    errors = capsys.readouterr().err.strip().splitlines()
    named = [error for error in errors if words in error]
    assert named and all(error.startswith(f"{path}:{line}: ") for error in named), errors


def test_a_path_names_its_own_line_else_the_nearest_table_s():
    lines = LineFinder('a = 1\n[t]\nb = [\n  1,\n  { c = 2,\n    d = \'\'\'x\n[y]\n\'\'\' },\n]\n[[u]]\n[[u]]\ne = 3\n')
    assert (lines.at("a"), lines.at("t", "b", 1), lines.at("t", "b", 1, "d"), lines.at("u", 1, "e")) == (1, 5, 6, 12)
    assert (lines.at("t", "nothing"), lines.at("nothing"), lines.line("u", "e", 1), lines.line("u", "", 0)) == (
        2, 1, 12, 10)
