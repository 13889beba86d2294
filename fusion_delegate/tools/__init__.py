"""The command-line tools: one module per command, sharing `runner`, `plan` and `text`.

Each command module has `HELP`, `add_arguments(parser)` and `run(args, options) -> int`;
`fusion_delegate.cli` wires them into one `fusion-delegate` program.
"""
