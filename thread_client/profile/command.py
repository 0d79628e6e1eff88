"""``thread-client profile list|show|check``: the built-in profiles, one profile with every default filled
in, and a profile file checked with every error named ``file:line: what``."""

from __future__ import annotations

import sys

from ..arguments import OneLineParser
from .reader import ProfileError, builtin_names, load_profile
from .writer import profile_toml

__all__ = ["profile_main"]


def profile_main(argv: list[str], prog: str) -> int:
    parser = OneLineParser(prog=f"{prog} profile", description="The profiles that describe an API to the daemon.")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=OneLineParser)
    verbs.add_parser("list", help="the built-in profiles, with what each describes")
    show = verbs.add_parser("show", help="a profile as TOML with every default filled in")
    show.add_argument("profile", metavar="NAME|PATH", help="a built-in profile's name, or a profile file")
    check = verbs.add_parser("check", help="check profile files; exit 2 with file:line: what for every error")
    check.add_argument("paths", metavar="PATH", nargs="+", help="profile files")
    args = parser.parse_args(argv)
    if args.verb == "list":
        for name in builtin_names():
            print(f"{name}\t{load_profile(name).description}")
        return 0
    if args.verb == "show":
        try:
            print(profile_toml(load_profile(args.profile)), end="")
        except ProfileError as exc:
            print(exc, file=sys.stderr)
            return 2
        return 0
    failed = False
    for path in args.paths:
        try:
            profile = load_profile(path if "/" in path or path.endswith(".toml") else f"./{path}")
        except ProfileError as exc:
            print(exc, file=sys.stderr)
            failed = True
        else:
            print(f"{path}: ok ({profile.name}: {profile.request.method} {profile.request.path}, "
                  f"nonce {profile.nonce.style}, {'signed' if profile.sign else 'unsigned'}, "
                  f"{len(profile.answers)} answer rules)")
    return 2 if failed else 0
