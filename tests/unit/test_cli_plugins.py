"""The development tooling's commands and binder backend reach the product through entry points
(berth.plugins), and say how to get berth-dev when it is not installed."""

from __future__ import annotations

import re

import typer
from berth_dev.binder.sim_backend import SimulatorBackend
from berth_dev.cli import dev_app
from typer.testing import CliRunner

import berth.cli
from berth.plugins import BINDER_BACKENDS, CLI_PLUGINS, load_plugin, plugin_names

runner = CliRunner()


def test_berth_dev_registers_its_commands_and_the_simulator_backend():
    assert plugin_names(CLI_PLUGINS) == ["cluster-sim", "demo", "dev"]
    assert load_plugin(CLI_PLUGINS, "dev") is dev_app
    assert load_plugin(BINDER_BACKENDS, "sim") is SimulatorBackend
    assert load_plugin(BINDER_BACKENDS, "no-such-backend") is None


def test_the_berth_command_lists_the_dev_tooling_where_it_always_stood():
    result = runner.invoke(berth.cli.app, ["--help"], env={"COLUMNS": "200"})
    commands = re.findall(r"^│ ([a-z][a-z-]*)  ", result.output, flags=re.MULTILINE)
    assert commands[:5] == ["tail", "demo", "version", "simulate", "deschedule"]
    assert commands[5:7] == ["dev", "publish"]
    assert commands[-1] == "cluster-sim"


def test_without_berth_dev_its_commands_say_how_to_install_it(monkeypatch):
    product_only = typer.Typer()
    product_only.command("version")(berth.cli.version)
    monkeypatch.setattr(berth.cli, "app", product_only)
    monkeypatch.setattr(berth.cli, "load_plugin", lambda group, name: None)
    berth.cli._add_plugin_command("dev")

    for argv in (["dev", "up", "--with-kubernetes"], ["dev", "--help"]):
        result = runner.invoke(product_only, argv, env={"COLUMNS": "200"})
        assert result.exit_code == 1
        assert "`berth dev` comes with Berth's development tooling: install berth-dev" in result.output
    listing = runner.invoke(product_only, ["--help"], env={"COLUMNS": "200"}).output
    assert "version" in listing and " dev " not in listing
