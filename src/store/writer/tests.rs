//! Unit tests of the writer's transaction helpers.

use super::*;

#[test]
fn a_failed_command_rolls_back_only_its_own_changes() {
    let mut conn = Connection::open_in_memory().expect("open");
    conn.execute_batch("CREATE TABLE t (v INTEGER NOT NULL)").expect("table");
    let mut tx = conn.transaction().expect("begin");
    in_savepoint(&mut tx, |c| c.execute("INSERT INTO t VALUES (1)", [])).expect("first");
    // Writes a row, then fails: the row must go with it.
    let failed = in_savepoint(&mut tx, |c| {
        c.execute("INSERT INTO t VALUES (2)", [])?;
        c.execute("INSERT INTO t VALUES (NULL)", [])
    });
    assert!(failed.is_err());
    in_savepoint(&mut tx, |c| c.execute("INSERT INTO t VALUES (3)", [])).expect("third");
    tx.commit().expect("commit");
    let rows: Vec<i64> = conn
        .prepare("SELECT v FROM t ORDER BY v")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .expect("rows");
    assert_eq!(rows, [1, 3]);
}
