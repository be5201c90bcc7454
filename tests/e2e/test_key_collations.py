"""A string key under a multi-level collation through the real jobs into the delta sink: changes committed between
the windows of one snapshot must each reach the sink once, by the window that read its chunk or by the stream,
also when an ALTER then orders the key differently. The Delta table is read with delta-rs alone and compared
with MariaDB row by row."""

from __future__ import annotations

from .cdc_helpers import Pipeline, delta_sink, paused_snapshot, source_rows
from .test_delta_sink import assert_delta_equals_source, delta_rows

# utf8mb4_uca1400_as_cs compares letters first, then accents, then case, and a tab only on a later level than the
# letters: 'a05' < 'A05' < 'á05', 'a\t05' sits right beside 'a05' and 'a05\t' right before it. utf8mb4_bin orders
# by bytes: 'A05' < 'a05' < 'á05' (its UTF-8 bytes come after 'z').
LETTERS = ("a", "A", "á", "Á", "b", "B", "é", "e", "E", "m", "M", "ö", "o", "z", "Z")


def keys() -> list[str]:
    """Each key beside a twin with a trailing tab, which the collation orders just before it ('a05' pads as 'a05 ',
    and a tab weighs less than a space), whatever the chunk bounds fall on."""
    inner = [f"{letter}{sep}{n:02d}" for letter in LETTERS for sep in ("", "\t", " ") for n in range(20)]
    return inner + [k + "\t" for k in inner]


def test_changes_between_windows_reach_the_sink_once_in_the_key_order_the_chunks_were_read_in(source_db, tmp_path):
    """Two snapshot tasks read the first and the second half of the chunks one after the other. While the second
    half's window is open, keys of both halves change: the first half's changes (after its high watermark) must
    come through the stream, the second's through the window. An ALTER then makes the key binary, under which
    accented keys of the first half sort after every key of the second: the stream, started after the ALTER,
    still tells each change its chunk in the collation the chunks were read in, not dropping it as a row of a
    chunk read later."""
    db = source_db
    db.execute("CREATE TABLE names (name VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_uca1400_as_cs NOT NULL "
               "PRIMARY KEY, v INT NOT NULL, note VARCHAR(20))")
    db.executemany("INSERT IGNORE INTO names VALUES (%s, 0, 'init')", [(k,) for k in keys()])
    p = Pipeline(db, tmp_path, delta_sink(tmp_path), ["names"], chunk_size=100)
    chunks = p.plan()
    assert len(chunks) >= 6, chunks
    # the second half starts at a key without a trailing tab: its twin is of the first half
    half = min((i for i, c in enumerate(chunks) if i and not c.start[0].endswith("\t")),
               key=lambda i: abs(i - len(chunks) // 2))
    first, second = chunks[:half], chunks[half:]
    boundary = second[0].start[0]
    ordered = [r[0] for r in db.execute("SELECT name FROM names ORDER BY name")]
    first_keys = ordered[: ordered.index(boundary)]
    assert any(k[0] in "áé" for k in first_keys) and any(k[0] in "MZ" for k in ordered[len(first_keys):]), boundary

    p.snapshot(first)

    def changes_in_the_second_window():
        # every key of the first half: its chunk's high watermark has passed, so only the stream can bring these
        db.executemany("UPDATE names SET v = v + 1, note = 'after 1st' WHERE name = %s", [(k,) for k in first_keys])
        db.execute("DELETE FROM names WHERE name IN ('a\t03', 'á 04', 'A07')")
        db.execute("INSERT INTO names VALUES ('a\t99', 1, 'new'), ('á\t99', 1, 'new')")
        db.execute("UPDATE names SET name = 'b05 ' WHERE name = 'b05'")  # the same key in other bytes
        # keys of the second half: the window folds them in
        db.execute("UPDATE names SET v = v + 10, note = 'in 2nd' WHERE name LIKE 'z%' OR name LIKE 'M%'")
        db.execute("DELETE FROM names WHERE name IN ('o\t05', 'Z 06')")
        db.execute("INSERT INTO names VALUES ('o\t99', 1, 'new'), ('ö 99', 1, 'new')")
        db.execute("UPDATE names SET name = 'z05 ' WHERE name = 'z05'")

    paused_snapshot(p, second, tmp_path / "second-paused", changes_in_the_second_window)
    p.collect()
    # before the stream, the sink holds the second half's keys as of its window's high watermark
    second_keys = {(r[0],) for r in db.execute("SELECT name FROM names WHERE name >= %s", (boundary,))}
    want, got = source_rows(db, "names"), delta_rows(p, db, "names")
    assert {k: got.get(k) for k in second_keys} == {k: want[k] for k in second_keys}
    assert second_keys & {("z05 ",), ("o\t99",), ("ö 99",)} and not second_keys & {("o\t05",), ("Z 06",)}

    db.execute("ALTER TABLE names MODIFY name VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL")
    db.execute("UPDATE names SET v = v + 100, note = 'after alter' WHERE name LIKE 'é%' OR name LIKE 'B%'")
    db.execute("INSERT INTO names VALUES ('É\t99', 1, 'new')")
    p.stream()
    assert_delta_equals_source(p, db, "names")
