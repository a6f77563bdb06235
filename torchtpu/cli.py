"""The `torchtpu` command (also `python -m torchtpu`).

    torchtpu qualify [MODEL] [options]   # see torchtpu/qualify/cli.py
"""

import sys

COMMANDS = {"qualify": "run a model on CPU, tpu eager and tpu compiled and report whether tpu qualifies"}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: torchtpu COMMAND [options]\n\ncommands:")
        for name, text in COMMANDS.items():
            print(f"  {name:<10} {text}")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "qualify":
        from .qualify.cli import main as qualify

        return qualify(rest)
    print(f"torchtpu: unknown command {command!r} (commands: {', '.join(COMMANDS)})", file=sys.stderr)
    return 2
