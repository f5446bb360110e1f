import uuid
def test_spark_duck_pyiceberg(spark, duckdb_conn, make_catalog, session_gateway):
    ns = "infra_" + uuid.uuid4().hex[:8]
    spark.sql(f"CREATE NAMESPACE cat.{ns}")
    spark.sql(f"CREATE TABLE cat.{ns}.t (id BIGINT, s STRING) USING iceberg PARTITIONED BY (s)")
    spark.sql(f"INSERT INTO cat.{ns}.t VALUES (1, 'a'), (2, 'b')")
    assert spark.table(f"cat.{ns}.t").count() == 2
    rows = duckdb_conn.execute(f"SELECT id, s FROM cat.{ns}.t ORDER BY id").fetchall()
    assert rows == [(1, "a"), (2, "b")]
    cat = make_catalog(session_gateway)
    tbl = cat.load_table(f"{ns}.t")
    assert tbl.scan().to_arrow().num_rows == 2
