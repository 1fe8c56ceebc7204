"""The Parquet dataset of `neutrino export --parquet` in Spark (pyspark, imported by the caller).

    from pyspark.sql import SparkSession
    from neutrino.analysis import spark as nspark

    session = SparkSession.builder.appName("traces").getOrCreate()
    nspark.load(session, "hdfs-or-local/path/to/dataset")    # temp views, as `neutrino query` names them
    session.sql("SELECT rank, kernel, avg(elapsed) FROM block_sched GROUP BY rank, kernel").show()

Each table directory is read with `spark.read.parquet` (Hive partition discovery gives the
`rank` and, for map tables, `kernel_key` columns; `mergeSchema` unites part files whose map
fields differ). The view names are those of `neutrino.analysis.query.view_names`. Recipes:
spec/analysis.md, "SQL and Spark".
"""

from __future__ import annotations

from pathlib import Path

from neutrino.analysis import columnar
from neutrino.analysis.query import view_names


def read_table(spark, dataset_dir, table: str):
    """One table of the dataset as a Spark DataFrame (`rank` an integer column)."""
    path = str(Path(dataset_dir) / table)
    frame = spark.read.option("mergeSchema", "true").option("basePath", path).parquet(path)
    if "rank" in frame.columns:
        frame = frame.withColumn("rank", frame["rank"].cast("int"))
    return frame


def load(spark, dataset_dir) -> dict[str, object]:
    """Register a temp view per table of the dataset (and per map under its map name); the DataFrames by view."""
    dataset_dir = Path(dataset_dir)
    schema = columnar.read_schema(dataset_dir)
    frames: dict[str, object] = {}
    for view, table in view_names(schema).items():
        if not (dataset_dir / table).is_dir():
            continue
        if table not in frames:
            frames[table] = read_table(spark, dataset_dir, table)
        frames[view] = frames[table]
        frames[view].createOrReplaceTempView(view)
    return frames
