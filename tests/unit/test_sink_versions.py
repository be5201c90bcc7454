"""The versions a sink goes through under each ``stream.schema_changes`` behaviour, and rows decoded under a
source version carried up to the sink's newest (``sink_versions``, ``upcast``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from airflow_cdc_provider.core.chunks import TableId
from airflow_cdc_provider.core.offsets import EventPosition
from airflow_cdc_provider.source.schema import Column, TableSchema
from airflow_cdc_provider.source.table_versions import TableVersion, origins, sink_versions, upcast

T = TableId("db", "t")


def col(name, column_type="int", nullable=True):
    data_type = column_type.split("(")[0].split()[0]
    if data_type == "varchar":
        length = int(column_type[len("varchar("):-1])
        return Column(name, data_type, column_type, nullable, "utf8mb4", "utf8mb4_general_ci", length, None, None,
                      None)
    return Column(name, data_type, column_type, nullable, None, None, None, None, None, None)


def schema(*columns):
    return TableSchema(T, tuple(c if isinstance(c, Column) else col(c) for c in columns), ("id",), ("id",))


def version(number, *columns, renamed=None, added=None):
    return TableVersion(number, schema(*columns), EventPosition("mysql-bin.000001", 100 * number, 0),
                        f"alter {number}", renamed or {}, added or {})


ID = col("id", nullable=False)
BASE = version(0, ID, "a", col("c", nullable=False), "q")
ADD = [BASE, version(1, ID, "a", col("c", nullable=False), "q", col("x", nullable=False), added={"x": 5})]
DROP = [BASE, version(1, ID, "a", "q")]
RENAME = [BASE, version(1, ID, col("b", nullable=False), col("c", nullable=False), "q", renamed={"b": "a"})]
WIDEN = [BASE, version(1, ID, "a", col("c", "bigint", nullable=False), "q")]


def names(v):
    return v.schema.column_names


def types(v):
    return {c.name: (c.column_type, c.nullable) for c in v.schema.columns}


def sink(versions, behaviour):
    out = sink_versions(versions, behaviour)
    assert not isinstance(out, str), out
    assert [(v.number, v.position, v.statement) for v in out] == [(v.number, v.position, v.statement) for v in versions]
    assert all((v.schema.table, v.schema.primary_key, v.schema.key_columns) == (T, ("id",), ("id",)) for v in out)
    return out


@pytest.mark.parametrize("behaviour", ["evolve", "resnapshot", "fail"])
def test_evolve_resnapshot_and_fail_take_the_sources_versions(behaviour):
    for versions in (ADD, DROP, RENAME, WIDEN):
        assert sink_versions(versions, behaviour) == versions
    assert sink_versions([], "lenient") == []
    with pytest.raises(ValueError, match="unknown schema change behaviour 'lenent'"):
        sink_versions(ADD, "lenent")


@pytest.mark.parametrize("behaviour", ["lenient", "ignore"])
def test_version_0_is_the_sources(behaviour):
    assert sink(ADD, behaviour)[0] == BASE
    assert sink([BASE], behaviour) == [BASE]


# -- lenient ------------------------------------------------------------------------------------------------


def test_lenient_adds_as_the_source_does():
    assert sink(ADD, "lenient") == ADD
    assert upcast({"id": 1, "a": 2, "c": 3, "q": 4}, sink(ADD, "lenient"), 0) == {"id": 1, "a": 2, "c": 3, "q": 4,
                                                                                 "x": 5}


def test_lenient_keeps_a_dropped_column_nullable_with_its_type():
    s = sink(DROP, "lenient")
    assert names(s[1]) == ["id", "a", "c", "q"]
    assert types(s[1])["c"] == ("int", True) and types(s[1])["id"] == ("int", False)
    assert s[1].added == {} and s[1].renamed == {}
    # a row of before the drop keeps its value; one decoded after it (no c in its image) holds NULL
    assert upcast({"id": 1, "a": 2, "c": 3, "q": 4}, s, 0) == {"id": 1, "a": 2, "c": 3, "q": 4}
    assert upcast({"id": 1, "a": 2, "q": 4}, s, 1) == {"id": 1, "a": 2, "c": None, "q": 4}


def test_lenient_keeps_a_renamed_column_and_adds_the_new_name_null_in_the_rows_that_existed():
    s = sink(RENAME, "lenient")
    assert names(s[1]) == ["id", "a", "b", "c", "q"]
    assert s[1].renamed == {} and s[1].added == {"b": None}
    assert types(s[1])["b"] == ("int", True), "NULL in the rows that existed"
    assert origins(s, 0)["a"] == ("column", "a") and origins(s, 0)["b"] == ("value", None)
    assert upcast({"id": 1, "a": 2, "c": 3, "q": 4}, s, 0) == {"id": 1, "a": 2, "b": None, "c": 3, "q": 4}
    assert upcast({"id": 1, "b": 2, "c": 3, "q": 4}, s, 1) == {"id": 1, "a": None, "b": 2, "c": 3, "q": 4}


def test_lenient_widens_as_the_source_does():
    s = sink(WIDEN, "lenient")
    assert s == WIDEN and types(s[1])["c"] == ("bigint", False)


def test_lenient_through_several_versions():
    versions = [
        BASE,
        version(1, ID, col("b"), col("c", nullable=False), "q", renamed={"b": "a"}),   # RENAME a TO b
        version(2, ID, "b", "q", "y", added={"y": 7}),                                 # DROP c, ADD y DEFAULT 7
        version(3, ID, "b", "q", "y", col("c", "bigint", nullable=False), added={"c": 0}),  # ADD c BIGINT NOT NULL
        version(4, ID, "a", "q", "y", "c", renamed={"a": "b"}),   # RENAME b TO a; c NULL again
    ]
    versions[4] = replace(versions[4], schema=schema(ID, "a", "q", "y", col("c", "bigint")))
    s = sink(versions, "lenient")
    # the source's order; a kept column after the one it followed
    assert [names(v) for v in s] == [["id", "a", "c", "q"], ["id", "a", "b", "c", "q"], ["id", "a", "b", "c", "q", "y"],
                                     ["id", "a", "b", "q", "y", "c"], ["id", "a", "b", "q", "y", "c"]]
    assert [v.added for v in s[1:]] == [{"b": None}, {"y": 7}, {}, {}]
    # c: dropped (kept, nullable), added again wider: one sink column, widened, nullable since the drop
    assert types(s[2])["c"] == ("int", True) and types(s[3])["c"] == ("bigint", True)
    rows = [{"id": 0, "a": 1, "c": 2, "q": 3}, {"id": 1, "b": 1, "c": 2, "q": 3}, {"id": 2, "b": 1, "q": 3, "y": 4},
            {"id": 3, "b": 1, "q": 3, "y": 4, "c": 5}, {"id": 4, "a": 1, "q": 3, "y": 4, "c": 5}]
    assert [upcast(row, s, k) for k, row in enumerate(rows)] == [
        {"id": 0, "a": 1, "b": None, "c": 2, "q": 3, "y": 7},
        {"id": 1, "a": None, "b": 1, "c": 2, "q": 3, "y": 7},
        {"id": 2, "a": None, "b": 1, "c": None, "q": 3, "y": 4},
        {"id": 3, "a": None, "b": 1, "c": 5, "q": 3, "y": 4},
        {"id": 4, "a": 1, "b": None, "c": 5, "q": 3, "y": 4},
    ]
    # the sink's versions are a chain of their own too: rows written under one (all its columns) carried up
    assert upcast({"id": 1, "a": None, "b": 1, "c": 2, "q": 3}, s, 1) == {"id": 1, "a": None, "b": 1, "c": 2, "q": 3,
                                                                          "y": 7}
    assert [TableVersion.from_dict(v.to_dict()) for v in s] == s


def test_lenient_keeps_a_dropped_column_where_it_was():
    versions = [version(0, ID, "a", "b", "c", "d"), version(1, ID, "x", "d", added={"x": None})]  # DROP a, b, c; ADD x
    versions.append(version(2, ID, "d", renamed={}))  # DROP x
    s = sink(versions, "lenient")
    assert names(s[1]) == ["id", "a", "b", "c", "x", "d"] and names(s[2]) == ["id", "a", "b", "c", "x", "d"]


def test_a_column_added_again_narrower_fits_the_kept_one():
    versions = [version(0, ID, col("c", "bigint")), version(1, ID), version(2, ID, "c", added={"c": None})]
    for behaviour in ("lenient", "ignore"):
        s = sink(versions, behaviour)
        assert types(s[2])["c"] == ("bigint", True)
        assert upcast({"id": 1, "c": 9}, s, 2) == {"id": 1, "c": 9}


@pytest.mark.parametrize("behaviour", ["lenient", "ignore"])
def test_a_column_added_again_with_another_type_is_refused(behaviour):
    versions = [BASE, version(1, ID, "a", "q"), version(2, ID, "a", "q", col("c", "varchar(10)"), added={"c": None})]
    reason = sink_versions(versions, behaviour)
    assert isinstance(reason, str)
    assert reason.startswith(f"db.t: version 2 (alter 2) cannot be followed under stream.schema_changes {behaviour}: ")
    assert "column 'c' is int in the sink and varchar(10) in the source" in reason
    # renamed to the name of a dropped column of another type: the same
    renamed = [BASE, version(1, ID, "a", "q"), version(2, ID, col("c", "varchar(10)"), "q", renamed={"c": "a"})]
    assert "column 'c' is int in the sink and varchar(10)" in sink_versions(renamed, behaviour)


def test_lenient_refuses_a_rename_that_changes_only_the_case():
    versions = [BASE, version(1, ID, "A", col("c", nullable=False), "q", renamed={"A": "a"})]
    reason = sink_versions(versions, "lenient")
    assert isinstance(reason, str) and "columns 'a' and 'A' would both be in the sink" in reason
    # under ignore the sink keeps a: rows from then on hold NULL in it
    s = sink(versions, "ignore")
    assert names(s[1]) == ["id", "a", "c", "q"] and upcast({"id": 1, "A": 2, "c": 3, "q": 4}, s, 1)["a"] is None


def test_the_newest_version_gives_the_sinks_columns_not_the_images():
    s = sink(DROP, "lenient")
    assert upcast({"id": 1, "a": 2, "q": 4}, s, 1) == {"id": 1, "a": 2, "c": None, "q": 4}
    s = sink(ADD, "ignore")
    assert upcast({"id": 1, "a": 2, "c": 3, "q": 4, "x": 5}, s, 1) == {"id": 1, "a": 2, "c": 3, "q": 4}


# -- ignore -------------------------------------------------------------------------------------------------


def test_ignore_does_not_write_a_new_column():
    s = sink(ADD, "ignore")
    assert s[1].schema == BASE.schema and s[1].added == {} and s[1].renamed == {}
    assert upcast({"id": 1, "a": 2, "c": 3, "q": 4}, s, 0) == {"id": 1, "a": 2, "c": 3, "q": 4}


def test_ignore_keeps_a_dropped_column_null_from_the_drop_on():
    s = sink(DROP, "ignore")
    assert names(s[1]) == ["id", "a", "c", "q"] and types(s[1])["c"] == ("int", True)
    assert upcast({"id": 1, "a": 2, "c": 3, "q": 4}, s, 0) == {"id": 1, "a": 2, "c": 3, "q": 4}
    assert upcast({"id": 1, "a": 2, "q": 4}, s, 1) == {"id": 1, "a": 2, "c": None, "q": 4}


def test_ignore_keeps_a_renamed_column_under_its_old_name_null_from_the_rename_on():
    s = sink(RENAME, "ignore")
    assert names(s[1]) == ["id", "a", "c", "q"] and s[1].added == {} and s[1].renamed == {}
    assert upcast({"id": 1, "a": 2, "c": 3, "q": 4}, s, 0) == {"id": 1, "a": 2, "c": 3, "q": 4}
    assert upcast({"id": 1, "b": 2, "c": 3, "q": 4}, s, 1) == {"id": 1, "a": None, "c": 3, "q": 4}


def test_ignore_widens_a_widened_column():
    s = sink(WIDEN, "ignore")
    assert s[1].schema == WIDEN[1].schema and types(s[1])["c"] == ("bigint", False)


def test_ignore_through_several_versions():
    versions = [
        BASE,
        version(1, ID, "a", col("c", "bigint", nullable=False), "q", "x", added={"x": 1}),  # widen c, ADD x
        version(2, ID, "b", col("c", "bigint", nullable=False), "q", "x", renamed={"b": "a"}),  # RENAME a TO b
        version(3, ID, "b", "q", "x"),  # DROP c: the sink keeps it, as wide as it became
    ]
    s = sink(versions, "ignore")
    assert all(names(v) == ["id", "a", "c", "q"] for v in s)
    assert [types(v)["c"] for v in s] == [("int", False), ("bigint", False), ("bigint", False), ("bigint", True)]
    assert [types(v)["a"] for v in s] == [("int", True)] * 4
    rows = [{"id": 0, "a": 1, "c": 2, "q": 3}, {"id": 1, "a": 1, "c": 2, "q": 3, "x": 4},
            {"id": 2, "b": 1, "c": 2, "q": 3, "x": 4}, {"id": 3, "b": 1, "q": 3, "x": 4}]
    assert [upcast(row, s, k) for k, row in enumerate(rows)] == [
        {"id": 0, "a": 1, "c": 2, "q": 3}, {"id": 1, "a": 1, "c": 2, "q": 3},
        {"id": 2, "a": None, "c": 2, "q": 3}, {"id": 3, "a": None, "c": None, "q": 3},
    ]


def test_ignore_writes_a_column_added_again_under_a_kept_name():
    versions = [BASE, version(1, ID, "a", "q"), version(2, ID, "a", "q", col("c", "bigint"), added={"c": 0})]
    s = sink(versions, "ignore")
    assert types(s[2])["c"] == ("bigint", True) and s[2].added == {}
    assert upcast({"id": 0, "a": 1, "c": 2, "q": 3}, s, 0)["c"] == 2  # kept as the sink held it
    assert upcast({"id": 1, "a": 1, "q": 3}, s, 1)["c"] is None
    assert upcast({"id": 2, "a": 1, "q": 3, "c": 8}, s, 2)["c"] == 8
