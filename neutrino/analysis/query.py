"""`neutrino query TRACE|JOB|DATASET "SQL"`: SQL over the Parquet dataset with DuckDB.

A trace or job is exported once (neutrino.analysis.columnar) into `<trace>/.parquet/` (or,
when the trace directory cannot be written, a directory under ~/.cache/neutrino/parquet/),
and that export is reused while the trace's files keep their sizes and times. Each table of
the dataset is a view: `launches`, `events`, `timeline`, `ranges`, `launch_args`, and per map
`map_<name>` and, when no other table has that name, `<name>`. spec/analysis.md, "SQL".
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import sys
from pathlib import Path

from neutrino.analysis import columnar
from neutrino.errors import NeutrinoError

CACHE_NAME = ".parquet"


class QueryError(NeutrinoError):
    """A query that cannot run: the message of the SQL engine, without a traceback."""


def _cache_dir(base: Path) -> Path:
    """`<trace>/.parquet`, or a per-trace directory under the user's cache when the trace is read-only."""
    if os.access(base, os.W_OK):
        return base / CACHE_NAME
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "neutrino" / "parquet"
    return root / hashlib.sha256(str(base.resolve()).encode()).hexdigest()[:16]


def dataset_for(path, *, refresh: bool = False) -> Path:
    """The Parquet dataset of `path`: itself when it is one, else the (up to date) cached export."""
    from neutrino.analysis import launch_stream
    from neutrino.analysis.ranks import find_group

    path = Path(path)
    if columnar.is_dataset(path):
        columnar.read_schema(path)  # refuses another schema version
        return path
    runs = launch_stream.members(path)
    group = find_group(path)
    base = Path(group) if group is not None else runs[0][1]
    cache = _cache_dir(base)
    if not refresh and columnar.is_dataset(cache):
        try:
            schema = columnar.read_schema(cache)
        except NeutrinoError:
            schema = {}
        if schema.get("source_signature") == columnar.source_signature(runs):
            return cache
    cache.parent.mkdir(parents=True, exist_ok=True)
    summary = columnar.export(path, cache)
    for problem in summary.problems:
        print(f"neutrino query: warning: {problem}", file=sys.stderr)
    return cache


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def view_names(schema: dict) -> dict[str, str]:
    """View name -> table directory: every table under its own name, and each map table also
    under its map's name when no table has that name already."""
    tables = schema.get("tables", {})
    views = {table: table for table in tables}
    for table, entry in tables.items():
        name = entry.get("map")
        if isinstance(name, str) and name not in views:
            views[name] = table
    return views


def table_scan(dataset: Path, table: str) -> str:
    """The DuckDB expression that reads one table of the dataset, partition columns typed."""
    glob = str(dataset / table / "**" / "*.parquet").replace("'", "''")
    types = "{'rank': 'INTEGER', 'kernel_key': 'VARCHAR'}" if table.startswith("map_") else "{'rank': 'INTEGER'}"
    return f"read_parquet('{glob}', hive_partitioning = true, union_by_name = true, hive_types = {types})"


def connect(dataset: Path):
    """A DuckDB connection (in memory) with one view per table of `dataset`."""
    try:
        import duckdb
    except ImportError:
        raise QueryError("neutrino query needs duckdb: pip install duckdb") from None
    schema = columnar.read_schema(dataset)
    con = duckdb.connect(":memory:")
    con.execute("SET enable_progress_bar = false")  # it would draw on stdout, amid the result
    for view, table in view_names(schema).items():
        if (dataset / table).is_dir():
            con.execute(f"CREATE VIEW {_quote(view)} AS SELECT * FROM {table_scan(dataset, table)}")
    return con


def run_sql(dataset: Path, sql: str) -> tuple[list[str], list[tuple]]:
    """(column names, rows) of `sql` over the dataset; a SQL error is a QueryError with DuckDB's message."""
    import duckdb

    con = connect(dataset)
    try:
        cursor = con.execute(sql)
        if cursor.description is None:
            return [], []
        return [d[0] for d in cursor.description], cursor.fetchall()
    except duckdb.Error as e:
        tables = ", ".join(sorted(view_names(columnar.read_schema(dataset))))
        raise QueryError(f"query: {str(e).strip()}\n    hint: tables: {tables}") from None
    finally:
        con.close()


def _cell(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def render(columns: list[str], rows: list[tuple], output_format: str = "table") -> str:
    """The result as an aligned text table, CSV (a header line) or JSON (a list of objects)."""
    if output_format == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([["" if v is None else v for v in row] for row in rows])
        return out.getvalue()
    if output_format == "json":
        return json.dumps([dict(zip(columns, row)) for row in rows], default=str, indent=1) + "\n"
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [all(isinstance(row[i], (int, float)) or row[i] is None for row in rows) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(columns, widths, numeric)).rstrip(),
             "  ".join("-" * w for w in widths)]
    for r in cells:
        lines.append("  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(r, widths, numeric)).rstrip())
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines) + "\n"


def main(path: str, sql: str, output_format: str = "table", refresh: bool = False) -> int:
    dataset = dataset_for(path, refresh=refresh)
    columns, rows = run_sql(dataset, sql)
    sys.stdout.write(render(columns, rows, output_format))
    return 0
