-- A dump of everything in schema pgsched that a fresh install and an
-- upgraded one must agree on, as (kind, name, definition) rows. Only the
-- alembic bookkeeping (pgsched.alembic_version and what hangs off it) is
-- left out. ACLs are expanded and sorted so the order of GRANTs does not
-- matter, only their effect.
WITH ns AS (
    SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = 'pgsched'
), rel AS (
    SELECT c.*
    FROM pg_catalog.pg_class c
    WHERE c.relnamespace = (SELECT oid FROM ns)
      AND c.relname <> 'alembic_version'
      AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class t ON t.oid = i.indrelid
                      WHERE i.indexrelid = c.oid AND t.relname = 'alembic_version'
                        AND t.relnamespace = (SELECT oid FROM ns))
), acl(oid, kind, items) AS (
    SELECT c.oid, 'relation', c.relacl FROM rel c
    UNION ALL SELECT p.oid, 'function', p.proacl FROM pg_catalog.pg_proc p WHERE p.pronamespace = (SELECT oid FROM ns)
), acl_text AS (
    SELECT a.oid, a.kind,
           coalesce((SELECT pg_catalog.string_agg(
                         pg_catalog.format('%s:%s:%s:%s', coalesce(r.rolname, 'PUBLIC'), x.privilege_type,
                                           x.is_grantable, coalesce(g.rolname, '?')),
                         ', ' ORDER BY coalesce(r.rolname, 'PUBLIC'), x.privilege_type, g.rolname)
                     FROM pg_catalog.aclexplode(a.items) x
                     LEFT JOIN pg_catalog.pg_roles r ON r.oid = x.grantee
                     LEFT JOIN pg_catalog.pg_roles g ON g.oid = x.grantor), '(owner only)') AS acl
    FROM acl a
)
SELECT 'schema' AS kind, n.nspname::text AS name,
       pg_catalog.concat_ws(' | ', pg_catalog.pg_get_userbyid(n.nspowner),
           (SELECT pg_catalog.string_agg(pg_catalog.format('%s:%s:%s', coalesce(r.rolname, 'PUBLIC'),
                                                           x.privilege_type, x.is_grantable),
                                     ', ' ORDER BY coalesce(r.rolname, 'PUBLIC'), x.privilege_type)
            FROM pg_catalog.aclexplode(n.nspacl) x LEFT JOIN pg_catalog.pg_roles r ON r.oid = x.grantee),
           pg_catalog.obj_description(n.oid, 'pg_namespace')) AS definition
FROM pg_catalog.pg_namespace n WHERE n.oid = (SELECT oid FROM ns)

UNION ALL
SELECT 'relation', c.relname::text,
       pg_catalog.concat_ws(' | ',
           'kind=' || c.relkind::text, 'persistence=' || c.relpersistence::text,
           'owner=' || pg_catalog.pg_get_userbyid(c.relowner),
           'options=' || coalesce(c.reloptions::text, '{}'),
           'rls=' || c.relrowsecurity, 'force_rls=' || c.relforcerowsecurity,
           'parent=' || coalesce((SELECT i.inhparent::regclass::text FROM pg_catalog.pg_inherits i
                                  WHERE i.inhrelid = c.oid), '-'),
           'bound=' || coalesce(pg_catalog.pg_get_expr(c.relpartbound, c.oid), '-'),
           'key=' || coalesce(pg_catalog.pg_get_partkeydef(c.oid), '-'),
           'acl=' || (SELECT a.acl FROM acl_text a WHERE a.oid = c.oid AND a.kind = 'relation'),
           'comment=' || coalesce(pg_catalog.obj_description(c.oid, 'pg_class'), '-'))
FROM rel c

UNION ALL
SELECT 'column', c.relname || '.' || a.attname,
       pg_catalog.concat_ws(' | ',
           'position=' || pg_catalog.row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum),
           pg_catalog.format_type(a.atttypid, a.atttypmod),
           CASE WHEN a.attnotnull THEN 'not null' ELSE 'null' END,
           'default=' || coalesce(pg_catalog.pg_get_expr(d.adbin, d.adrelid), '-'),
           'identity=' || a.attidentity::text, 'generated=' || a.attgenerated::text,
           'collation=' || coalesce((SELECT co.collname FROM pg_catalog.pg_collation co
                                     WHERE co.oid = a.attcollation AND a.attcollation <> t.typcollation), '-'),
           'local=' || a.attislocal, 'inherited=' || a.attinhcount,
           'acl=' || coalesce(a.attacl::text, '-'),
           'comment=' || coalesce(pg_catalog.col_description(c.oid, a.attnum), '-'))
FROM rel c
JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')

UNION ALL
SELECT 'constraint', coalesce(c.relname, t.typname) || '.' || k.conname,
       pg_catalog.concat_ws(' | ', k.contype::text, pg_catalog.pg_get_constraintdef(k.oid, true),
           'deferrable=' || k.condeferrable, 'validated=' || k.convalidated,
           'local=' || k.conislocal, 'inherited=' || k.coninhcount, 'noinherit=' || k.connoinherit)
FROM pg_catalog.pg_constraint k
LEFT JOIN rel c ON c.oid = k.conrelid
LEFT JOIN pg_catalog.pg_type t ON t.oid = k.contypid
WHERE k.connamespace = (SELECT oid FROM ns) AND (c.oid IS NOT NULL OR k.conrelid = 0)

UNION ALL
SELECT 'index', c.relname::text,
       pg_catalog.concat_ws(' | ', pg_catalog.pg_get_indexdef(i.indexrelid), 'valid=' || i.indisvalid,
           'parent=' || coalesce((SELECT h.inhparent::regclass::text FROM pg_catalog.pg_inherits h
                                  WHERE h.inhrelid = c.oid), '-'))
FROM pg_catalog.pg_index i JOIN rel c ON c.oid = i.indexrelid

UNION ALL
SELECT 'sequence', c.relname::text,
       pg_catalog.concat_ws(' | ', s.seqtypid::regtype::text, s.seqstart, s.seqincrement, s.seqmax, s.seqmin,
           s.seqcache, s.seqcycle,
           'owned_by=' || coalesce((SELECT dc.relname || '.' || da.attname
                                    FROM pg_catalog.pg_depend dp
                                    JOIN pg_catalog.pg_class dc ON dc.oid = dp.refobjid
                                    JOIN pg_catalog.pg_attribute da ON da.attrelid = dp.refobjid
                                                                   AND da.attnum = dp.refobjsubid
                                    WHERE dp.classid = 'pg_catalog.pg_class'::regclass AND dp.objid = c.oid
                                      AND dp.deptype = 'a'), '-'))
FROM pg_catalog.pg_sequence s JOIN rel c ON c.oid = s.seqrelid

UNION ALL
SELECT 'view', c.relname::text, pg_catalog.pg_get_viewdef(c.oid, true)
FROM rel c WHERE c.relkind IN ('v', 'm')

UNION ALL
SELECT 'function', p.oid::regprocedure::text,
       pg_catalog.concat_ws(' | ',
           CASE WHEN p.prokind IN ('f', 'p', 'w') THEN pg_catalog.pg_get_functiondef(p.oid) ELSE p.prokind::text END,
           'owner=' || pg_catalog.pg_get_userbyid(p.proowner),
           'acl=' || (SELECT a.acl FROM acl_text a WHERE a.oid = p.oid AND a.kind = 'function'),
           'comment=' || coalesce(pg_catalog.obj_description(p.oid, 'pg_proc'), '-'))
FROM pg_catalog.pg_proc p WHERE p.pronamespace = (SELECT oid FROM ns)

UNION ALL
SELECT 'trigger', c.relname || '.' || g.tgname,
       pg_catalog.concat_ws(' | ', pg_catalog.pg_get_triggerdef(g.oid, true), 'enabled=' || g.tgenabled::text)
FROM pg_catalog.pg_trigger g JOIN rel c ON c.oid = g.tgrelid
WHERE NOT g.tgisinternal

UNION ALL
SELECT 'policy', p.tablename || '.' || p.policyname,
       pg_catalog.concat_ws(' | ', p.permissive, p.roles::text, p.cmd, 'using=' || coalesce(p.qual, '-'),
                            'check=' || coalesce(p.with_check, '-'))
FROM pg_catalog.pg_policies p WHERE p.schemaname = 'pgsched'

UNION ALL
SELECT 'type', t.typname::text,
       pg_catalog.concat_ws(' | ', t.typtype::text, pg_catalog.pg_get_userbyid(t.typowner),
           coalesce((SELECT pg_catalog.string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                     FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid), '-'),
           'acl=' || coalesce(t.typacl::text, '-'))
FROM pg_catalog.pg_type t
WHERE t.typnamespace = (SELECT oid FROM ns) AND t.typrelid = 0 AND t.typelem = 0

UNION ALL
SELECT 'rule', r.tablename || '.' || r.rulename, r.definition
FROM pg_catalog.pg_rules r WHERE r.schemaname = 'pgsched'

UNION ALL
SELECT 'statistics', s.stxname::text, pg_catalog.pg_get_statisticsobjdef(s.oid)
FROM pg_catalog.pg_statistic_ext s WHERE s.stxnamespace = (SELECT oid FROM ns)

UNION ALL
SELECT 'default_acl', d.defaclobjtype::text, d.defaclacl::text
FROM pg_catalog.pg_default_acl d WHERE d.defaclnamespace = (SELECT oid FROM ns)

ORDER BY 1, 2, 3
