"""`pgsched demo --story`: print the story scene by scene (or as JSON) and say where kept databases are."""

from __future__ import annotations

import sys
import warnings

import click

from pgsched.cli.common import EXIT_FAILURE, CliState, emit_json

EXIT_INTERRUPTED = 130  # as a shell reports a command stopped by Ctrl-C


def play_story(cli: CliState, scene: int | None, *, keep: bool, as_json: bool) -> None:
    """Run the story on the server of the configured DSN (else the embedded one) and print it."""
    from pgsched.story import SceneResult, run_story
    from pgsched.story.runner import HEADER, footer, render_scene

    with warnings.catch_warnings():
        # platformdirs, inside the embedded server's package, warns when XDG_RUNTIME_DIR is unset.
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        dsn = cli.resolve(migrate=False)

    def show(result: SceneResult) -> None:
        click.echo("\n" + render_scene(result), nl=False)

    if not as_json:
        click.echo(HEADER, nl=False)
    try:
        story = run_story(dsn, [scene] if scene else None, keep=keep, on_scene=None if as_json else show)
    except KeyboardInterrupt:
        click.echo("interrupted: the scratch databases were dropped", err=True)
        sys.exit(EXIT_INTERRUPTED)
    if as_json:
        emit_json(story.as_dict())
    else:
        click.echo("\n" + footer(story.scenes), nl=False)
    if keep:
        click.echo("kept the scratch databases (drop them with DROP DATABASE ... WITH (FORCE)):", err=True)
        for result in story.scenes:
            click.echo(f"  scene {result.number}: {result.database}  {result.dsn}", err=True)
    if not story.ok:
        sys.exit(EXIT_FAILURE)
