"""The catalog queries of the PostgreSQL source (ADBC placeholders ``$n``; every value
bound). OIDs are read as int8 and typed ``"char"`` columns as text: the driver reads an
``oid`` as a signed int32 and would turn OIDs past 2^31 negative."""

TABLES_SQL = """
SELECT c.oid::int8, n.nspname::text, c.relname::text, pg_table_is_visible(c.oid),
       c.relispartition
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp\\_%'
ORDER BY n.nspname, c.relname
"""
# Each column with its type's name, kind and (for arrays) element type name.
COLUMNS_SQL = """
SELECT a.attnum::int4, a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       a.attndims::int4, a.atttypmod::int4, t.typname::text, t.typtype::text,
       t.typbasetype::int8, t.typtypmod::int4, e.typname::text
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""
# A domain's base type (a domain may be over another domain).
TYPE_SQL = """
SELECT t.typname::text, t.typtype::text, t.typbasetype::int8, t.typtypmod::int4,
       e.typname::text
FROM pg_type t LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
WHERE t.oid = $1::oid
"""
# Primary key first, then unique indexes: valid, not partial, no expressions.
KEYS_SQL = """
SELECT i.indisprimary, c.relname::text, (i.indkey::int2[])[0:i.indnkeyatts - 1]::int4[]
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = $1::oid AND i.indisunique AND i.indisvalid
  AND i.indpred IS NULL AND i.indexprs IS NULL
ORDER BY i.indisprimary DESC, i.indnkeyatts, c.relname
"""
PRIVILEGE_SQL = """
SELECT has_table_privilege($1::oid, 'SELECT') OR NOT EXISTS (
  SELECT 1 FROM pg_attribute a
  WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped
    AND NOT has_column_privilege($1::oid, a.attnum, 'SELECT'))
"""
#: Bytes, estimated rows and "never analysed" of a table, or of the leaf partitions of a
#: partitioned one. ``pg_partition_tree`` lists nothing for a table that is not
#: partitioned, so the table itself is named too (it was left out: every table read as
#: 0 bytes and was counted with count(*) at every describe, once per slice).
SIZE_SQL = """
SELECT coalesce(sum(pg_relation_size(c.oid)), 0)::int8,
       coalesce(sum(greatest(c.reltuples, 0)), 0)::float8, bool_or(c.reltuples < 0)
FROM pg_class c
WHERE c.oid IN (SELECT $1::oid UNION ALL
                SELECT p.relid FROM pg_partition_tree($1::oid) p WHERE p.isleaf)
  AND c.relkind NOT IN ('p', 'I')
"""
