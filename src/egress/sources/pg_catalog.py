"""The catalog queries of the PostgreSQL source (psycopg placeholders; every value bound)."""

TABLES_SQL = """
SELECT c.oid, n.nspname, c.relname, pg_table_is_visible(c.oid), c.relispartition
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp\\_%'
ORDER BY n.nspname, c.relname
"""
# Each column with its type's name, kind and (for arrays) element type name.
COLUMNS_SQL = """
SELECT a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attndims,
       a.atttypmod, t.typname, t.typtype, t.typbasetype, t.typtypmod, e.typname
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""
# A domain's base type (a domain may be over another domain).
TYPE_SQL = """
SELECT t.typname, t.typtype, t.typbasetype, t.typtypmod, e.typname
FROM pg_type t LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
WHERE t.oid = %s
"""
# Primary key first, then unique indexes: valid, not partial, no expressions.
KEYS_SQL = """
SELECT i.indisprimary, c.relname, (i.indkey::int2[])[0:i.indnkeyatts - 1]
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = %s AND i.indisunique AND i.indisvalid
  AND i.indpred IS NULL AND i.indexprs IS NULL
ORDER BY i.indisprimary DESC, i.indnkeyatts, c.relname
"""
PRIVILEGE_SQL = """
SELECT has_table_privilege(%(oid)s, 'SELECT') OR NOT EXISTS (
  SELECT 1 FROM pg_attribute a
  WHERE a.attrelid = %(oid)s AND a.attnum > 0 AND NOT a.attisdropped
    AND NOT has_column_privilege(%(oid)s, a.attnum, 'SELECT'))
"""
#: Bytes, estimated rows and "never analysed" of a table, or of the leaf partitions of a
#: partitioned one. ``pg_partition_tree`` lists nothing for a table that is not
#: partitioned, so the table itself is named too (it was left out: every table read as
#: 0 bytes and was counted with count(*) at every describe, once per slice).
SIZE_SQL = """
SELECT coalesce(sum(pg_relation_size(c.oid)), 0), coalesce(sum(greatest(c.reltuples, 0)), 0),
       bool_or(c.reltuples < 0)
FROM pg_class c
WHERE c.oid IN (SELECT %(oid)s::oid UNION ALL
                SELECT p.relid FROM pg_partition_tree(%(oid)s::oid) p WHERE p.isleaf)
  AND c.relkind NOT IN ('p', 'I')
"""
