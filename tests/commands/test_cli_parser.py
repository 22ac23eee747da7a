"""The command line's parser: ``main`` builds only the parser of the command it
runs, and that parser is the one the whole command line has."""

from __future__ import annotations

import argparse

import pytest

from hostbroker import cli


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_command_alone_parses_and_helps_as_in_the_whole_parser():
    whole = _commands(cli.build_parser())
    assert list(whole) == [name for name, _ in cli._COMMANDS]
    for name, parser in whole.items():
        alone = _commands(cli.build_parser(name))
        assert list(alone) == [name]
        assert alone[name].format_help() == parser.format_help(), name


def test_a_word_that_is_no_command_gets_the_whole_parser_s_answer(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["colour"])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert "invalid choice: 'colour'" in said and "'serve'" in said and "'load'" in said
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("hostbroker ")


def test_main_builds_only_the_command_it_runs(monkeypatch, capsys):
    built = []
    real = cli.build_parser

    def counting(command=None):
        parser = real(command)
        built.append(list(_commands(parser)))
        return parser

    monkeypatch.setattr(cli, "build_parser", counting)
    with pytest.raises(SystemExit) as exited:
        cli.main(["top", "--interval", "0"])
    assert exited.value.code == 2
    assert "--interval: must be above 0" in capsys.readouterr().err
    assert built == [["top"]]
