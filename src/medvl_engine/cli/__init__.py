"""Command lines: ``medvl`` (:mod:`medvl_engine.cli.main`, one ``cmd_<name>`` module per
subcommand) and ``medvl-train`` (:mod:`medvl_engine.cli.train`)."""

__all__: list[str] = []
