"""Searching memory from the command line: ``memsync search`` (one query, or ``--batch`` of JSON
lines) and ``memsync timeline``. Text output comes from ``servers.render``, JSON is the search
library's contract."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, TypeVar, cast

import click

from memsync.commands.options import (
    common_options,
    emit,
    errors_as_exit,
    json_option,
    setting_default,
    settings_from,
    settings_note,
)
from memsync.config.errors import StoreUnavailable
from memsync.config.filters import FILTER_PARAMS
from memsync.config.kinds import KIND_CHOICES, choice_for
from memsync.config.limits import MAX_DEPTH, MAX_LIMIT, MAX_OFFSET, MAX_WINDOW_DAYS
from memsync.config.settings import Settings
from memsync.servers.render import response_text, result_line

if TYPE_CHECKING:  # the search library loads when a command runs, not with `memsync --help`
    from memsync.search import Searcher
    from memsync.search.request import RequestParser, SearchFields

F = TypeVar("F", bound=Callable[..., Any])
FILTER_FIELDS = frozenset(p.field for p in FILTER_PARAMS)
BATCH_KEYS = ", ".join(f'"{k}"' for k in ("query", "kind", *(p.field for p in FILTER_PARAMS), "window_days", "order",
                                          "limit", "offset", "full", "all"))
WINDOW = setting_default("window_days")
CUTOFF = setting_default("min_confidence")
SEARCH_HELP = f"""Search memory by meaning and by words (hybrid), newest {WINDOW} days by default.

Results are observations (#id), summaries (#S id) and prompts (#P id), each with its
score, the confidence: the relevance model's calibrated chance in 0..1 that the result is
relevant (0.30 means about 3 in 10 results so scored are what you were looking for). Results
under the min_confidence cutoff ({CUTOFF}) are left out and counted in the
header; --all lists them. --explain shows the raw signals behind each score. When the vector
store is not reachable the answer comes from full-text search and says so (mode
lexical_fallback). With --json the output is the documented contract: {{"mode", "results":
[{{"kind", "id", "score", "signals": {{"found_by", "fused", ...}}, ...}}], "cutoff", ...}}.
"""


class KindChoice(click.Choice[str]):
    """``--kind``: the offered choices in the help and in errors, and every accepted kind name (the
    renamed ``sessions`` among them) taken as the choice it stands for (the table of ``config.kinds``)."""

    def __init__(self) -> None:
        super().__init__(KIND_CHOICES)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """The choice ``value`` names, or a usage error listing the choices."""
        return super().convert(choice_for(value), param, ctx)


def filter_options(command: F) -> F:
    """One option per search filter (``--project``, ``--type``, ``--since``, ...), as declared in
    ``config.filters``: a filter declared there is an option here, as it is a parameter of the
    HTTP API and the MCP tools."""
    for param in reversed(FILTER_PARAMS):
        many = param.shape == "list"
        command = click.option(param.flag, param.field, multiple=many, default=None,
                               help=param.help + (" Repeatable." if many else ""))(command)
    return command


WHOLE_NUMBERS = ("limit", "offset", "window_days")  # batch-line fields read with int(), as the options are


def _batch_line(searcher: Searcher, parser: RequestParser, line: str, defaults: SearchFields) -> dict[str, Any]:
    """One line of `search --batch`: a JSON request in (the fields of ``search.request.SearchFields``;
    the command's options fill the ones a line leaves empty), the JSON contract (or an error) out."""
    from memsync.search import SearchError

    try:
        req = json.loads(line)
        if not isinstance(req, dict) or not isinstance(req.get("query"), str):
            raise ValueError('each line must be a JSON object with a string "query"')
        # An empty value takes the option's, but a line's window_days of 0 or null is its own (all
        # time, the configured window). A line names its filters flat, by field ("types").
        given = {k: v for k, v in req.items() if v or k == "window_days"}
        fields: dict[str, Any] = {**defaults, **{k: v for k, v in given.items() if k not in FILTER_FIELDS}}
        fields["filters"] = {**defaults.get("filters", {}), **{k: v for k, v in given.items() if k in FILTER_FIELDS}}
        for key in WHOLE_NUMBERS:  # "5" and 5.0 as the command took them before the one parser
            if isinstance(fields.get(key), (str, float)):
                fields[key] = int(fields[key])
        return searcher.search(parser.request(cast("SearchFields", fields))).to_json()
    except (ValueError, TypeError, SearchError) as exc:
        return {"error": str(exc)}


def _refused_exits(settings: Settings) -> None:
    """A remote Chroma that refuses the credentials or lacks the tenant or database is a setup
    error: exit 2 with the reason, rather than answer lexically as for a server that is down
    (which still falls back: that outage passes). The search servers keep falling back, and say why."""
    from memsync.chroma.collections import check_remote

    with contextlib.suppress(StoreUnavailable):
        check_remote(settings, settings.search_timeout_ms / 1000)  # no longer than the search would wait


@click.command(help=SEARCH_HELP)
@common_options
@json_option
@click.argument("query", required=False, default="")
@click.option("--kind", type=KindChoice(), default="all", show_default=True,
              help="Which records to search ('sessions' is accepted for summaries).")
@filter_options
@click.option("--limit", type=click.IntRange(1, MAX_LIMIT), default=10, show_default=True, help="Results to show.")
@click.option("--offset", type=click.IntRange(0, MAX_OFFSET), default=0, show_default=True, help="Results to skip.")
@click.option("--window-days", type=click.IntRange(0, MAX_WINDOW_DAYS), default=None,
              help=f"Recency window in days; 0 = all time {settings_note('window_days')}.")
@click.option("--order", type=click.Choice(["relevance", "newest", "oldest"]), default="relevance", show_default=True)
@click.option("--full", is_flag=True, help="Include each full record.")
@click.option("--all", "show_all", is_flag=True,
              help="Also list the results below the confidence cutoff (min_confidence).")
@click.option("--explain", is_flag=True,
              help="Under each result, the raw signals behind its score: which sides found it, the fused value, "
                   "each list's rank, the cosine (in --json they are always in each result's signals).")
# JSON lines are UTF-8; a byte that is not becomes U+FFFD, so a bad line is still searched and
# answered rather than ending the whole batch with a decode error (stdin and a file alike).
@click.option("--batch", type=click.File("r", encoding="utf-8", errors="replace"), default=None,
              help=f'Run one search per JSON line of FILE ("-" = stdin): {{{BATCH_KEYS}}}, within the same bounds '
                   'as the options (an empty field takes --kind, --limit, --window-days or the filter options); one '
                   'JSON response per line, in order.')
def search(as_json: bool, query: str, kind: str, limit: int, offset: int, window_days: int | None, order: str,
           full: bool, show_all: bool, explain: bool, batch: IO[str] | None, **kwargs: Any) -> None:
    """``memsync search``: its help is SEARCH_HELP (the window's default read from the settings)."""
    filters = {p.field: kwargs.pop(p.field) for p in FILTER_PARAMS}
    settings = settings_from(kwargs).settings
    from memsync.search import Searcher
    from memsync.search.request import RequestParser, SearchFields

    with errors_as_exit(settings):
        _refused_exits(settings)
        searcher = Searcher(settings)  # refused when the data directory belongs to another database
    parser = RequestParser(settings.max_query_chars, searcher.observation_types)
    by_option = RequestParser(settings.max_query_chars, searcher.observation_types, lambda p: p.flag)
    try:
        with errors_as_exit(settings):
            if batch is not None:
                # Every filter option is a default of the lines that leave it empty (before, only
                # --project and --platform were; the others were ignored with --batch). A bad
                # option is refused once, by its name, before any line (exit 2).
                by_option.filters(filters)
                defaults = SearchFields(kind=None if kind == "all" else kind, limit=limit, window_days=window_days,
                                        filters={k: v for k, v in filters.items() if v}, all=show_all)
                for line in batch:
                    if line.strip():
                        click.echo(json.dumps(_batch_line(searcher, parser, line, defaults), default=str))
                return
            fields = SearchFields(query=query, kind=kind, filters=filters, window_days=window_days, order=order,
                                  limit=limit, offset=offset, full=full, all=show_all)
            resp = searcher.search(by_option.request(fields))  # a refused value: errors_as_exit, exit 2
            emit(resp.to_json(), as_json, response_text(resp, explain))
    finally:
        searcher.close()


@click.command()
@common_options
@json_option
@click.argument("anchor")
@click.option("--before", "depth_before", type=click.IntRange(0, MAX_DEPTH), default=5, show_default=True,
              help="Records before the anchor.")
@click.option("--after", "depth_after", type=click.IntRange(0, MAX_DEPTH), default=5, show_default=True,
              help="Records after the anchor.")
@click.option("--project", default=None, help="Only this project.")
def timeline(as_json: bool, anchor: str, depth_before: int, depth_after: int, project: str | None,
             **kwargs: Any) -> None:
    """What happened around ANCHOR, in order: observations, summaries and prompts mixed.

    ANCHOR is an observation id (123 or #123), S123 for a summary, P123 for a prompt, an ISO
    timestamp, or a query (the anchor is then its best match).
    """
    settings = settings_from(kwargs).settings
    from memsync.search import Searcher
    from memsync.search.request import RequestParser, valid_unicode

    with errors_as_exit(settings):
        searcher = Searcher(settings)
    parser = RequestParser(settings.max_query_chars, searcher.observation_types)
    try:
        with errors_as_exit(settings):
            # The one parser's rules, as for search: the depths' bounds, the anchor (which may be a
            # query) within max_query_chars, and a byte that is not UTF-8 (a lone surrogate) as U+FFFD.
            before, after = parser.depths(depth_before, depth_after)
            results, key = searcher.timeline(parser.query(anchor, "anchor"), before, after,
                                             valid_unicode(project) if project else None)
            data = {"anchor": {"kind": key[0].value, "id": key[1]}, "results": [r.to_json() for r in results]}
            emit(data, as_json, "\n".join(result_line(r) for r in results) or "(no records)")
    finally:
        searcher.close()
