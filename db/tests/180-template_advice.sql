-- Advice on the editorial template (db/functions/180-template_advice.sql): every rule as
-- docs/operators.md states it, what is not advice, advice over stored records and its counts,
-- who may read it, and that it never refuses a save nor reaches search.
begin;
select plan(41);

-- A record that fits the template: a Purpose that says what it does, Instructions, Notes, plain text, a docs URL.
create temporary table fits (guidance text) on commit drop;
insert into fits values (E'Purpose: Send a text message to a phone number.\nInstructions: POST /v1/messages with To and Body.\nNotes: Paid per message.');

select results_eq(
  $$select code from payrail.get_template_advice_kinds()$$,
  $$values ('no_purpose'), ('vague_purpose'), ('no_instructions'), ('no_notes'), ('markup'), ('no_docs_url')$$,
  'kinds: every piece of advice, in the template''s order');
select is_empty(
  $$select * from payrail.get_template_advice_kinds() where summary = '' or fix = '' or fix !~ '^[A-Z]'$$,
  'kinds: each has a summary and says what to do');
select is_empty(
  $$select * from payrail.advise_provider_method('Twilio', 'Send an SMS', (select guidance from fits), 'https://www.twilio.com/docs/sms')$$,
  'a record that fits the template gets no advice');

-- Template lines: a line that starts, after white space, with the label and a colon, in any ASCII case.
select results_eq(
  $$select code from payrail.advise_provider_method('Acme', 'Geocode', E'Instructions: GET /geocode.\nNotes: Free.', 'https://docs.acme.example')$$,
  $$values ('no_purpose')$$,
  'no_purpose: no line starts "Purpose:"');
select is_empty(
  $$select * from payrail.advise_provider_method('Acme', 'Geocode',
      E'\t  PURPOSE: Turn a street address into map coordinates.\n  instructions: GET /geocode.\n\u00a0notes: Free.', 'https://docs.acme.example')$$,
  'template lines: leading white space (tabs, no-break spaces) and the label''s case do not matter');
select results_eq(
  $$select code from payrail.advise_provider_method('Acme', 'Geocode',
      E'Purpose - Turn a street address into map coordinates.\nThe Purpose: is later.\nInstructions: GET.\nNotes: Free.', 'https://docs.acme.example')$$,
  $$values ('no_purpose')$$,
  'template lines: a label without its colon, or not at the start of a line, is no template line');
select results_eq(
  $$select code from payrail.advise_provider_method('Acme', 'Geocode', E'Purpose: Turn a street address into map coordinates.', 'https://docs.acme.example')$$,
  $$values ('no_instructions'), ('no_notes')$$,
  'no_instructions, no_notes: each line missing is advised, in order');

-- vague_purpose: fewer than 4 words, the names again, a URL, code; each reason said.
select is(
  (select advice from payrail.advise_provider_method('TheClique', 'Songkick concert', E'Purpose: Concert info\nInstructions: GET.\nNotes: Data.', 'https://x.example')),
  'The Purpose line does not say what the method does in words an agent would ask with: it has 2 words (at least 4).',
  'vague_purpose: two words are too few, and the advice says how many');
select results_eq(
  $$select code from payrail.advise_provider_method('Acme', 'Geocode', E'Purpose:\nInstructions: GET.\nNotes: Free.', 'https://x.example')$$,
  $$values ('vague_purpose')$$,
  'vague_purpose: an empty Purpose line is a vague one, not a missing one');
select is(
  (select advice from payrail.advise_provider_method('Kick.com API | Kick API', 'Get Channel Clips', E'Purpose: Get Channel Clips (Kick API)\nInstructions: GET.\nNotes: Data.', null)
   where code = 'vague_purpose'),
  'The Purpose line does not say what the method does in words an agent would ask with: it only repeats the provider''s and method''s names.',
  'vague_purpose: words all among the provider''s and method''s (case, punctuation aside) only repeat the names');
select is(
  (select advice from payrail.advise_provider_method('Shazam', 'Artist Info', E'Purpose: Information about any artist from https://www.shazam.com.\nInstructions: GET.\nNotes: Data.', null)
   where code = 'vague_purpose'),
  'The Purpose line does not say what the method does in words an agent would ask with: it holds a URL.',
  'vague_purpose: a URL in the Purpose line');
select is(
  (select advice from payrail.advise_provider_method('Golf', 'Earnings', E'Purpose: Fetch the player earnings for a given `tournId`.\nInstructions: GET.\nNotes: Data.', null)
   where code = 'vague_purpose'),
  'The Purpose line does not say what the method does in words an agent would ask with: it holds code (`...`, {...} or a /path).',
  'vague_purpose: code in the Purpose line (a backtick)');
select results_eq(
  $$select p.purpose, exists (select from payrail.advise_provider_method('Acme', 'Geocode', 'Purpose: ' || p.purpose || E'\nInstructions: GET.\nNotes: Free.', null) as a
                              where a.code = 'vague_purpose')
    from (values ('Call GET /v1/geocode for an address'), ('Returns {"lat": 1} for an address given'), ('Convert latitude/longitude into a street address'),
                 ('Search flights by route, dates (one or more cities)')) as p(purpose)$$,
  $$values ('Call GET /v1/geocode for an address', true), ('Returns {"lat": 1} for an address given', true),
           ('Convert latitude/longitude into a street address', false), ('Search flights by route, dates (one or more cities)', false)$$,
  'vague_purpose: a word starting with "/" (a path) or a brace is code; a slash inside a word and parentheses are not');
select results_eq(
  $$select p.purpose, (select a.advice from payrail.advise_provider_method('Acme', 'Geocode', 'Purpose: ' || p.purpose || E'\nInstructions: GET.\nNotes: Free.', null) as a
                       where a.code = 'vague_purpose')
    from (values ('查找今晚的酒店房间'), ('酒店'), ('ホテルの空室を探す'), ('ค้นหาโรงแรมว่างคืนนี้'), ('Найти свободный номер в отеле'), ('호텔 빈방')) as p(purpose)$$,
  $$values ('查找今晚的酒店房间', null),
           ('酒店', 'The Purpose line does not say what the method does in words an agent would ask with: it has 1 word (at least 4).'),
           ('ホテルの空室を探す', null), ('ค้นหาโรงแรมว่างคืนนี้', null), ('Найти свободный номер в отеле', null),
           ('호텔 빈방', 'The Purpose line does not say what the method does in words an agent would ask with: it has 2 words (at least 4).')$$,
  'vague_purpose: in scripts written without spaces, two letters count as a word; other scripts count words between spaces');
select is(payrail._template_word_count(payrail._template_words('Send a text-message, to: 2 phones!')), 7,
  'words: runs of characters that are neither white space nor ASCII punctuation, digits included');

-- markup: each kind of Markdown and HTML, named; plain text that looks a little like it is not.
select results_eq(
  $$select m.text, payrail._markup_in_words(m.text)
    from (values (E'```\ncurl x\n```'), (E'Intro\n## Parameters'), (E'| a | b |\n|---|:---:|'), ('See [the docs](https://x.example/docs).'),
                 ('![logo](https://x.example/l.png)'), ('Get the **popular sites**.'), ('Returns *json* or *xml*.'), ('Pass `tournId`.'),
                 ('Line one<br>line two'), ('<B>Bold</B>'), ('Ben &amp; Jerry'), ('Quote &#39;x&#39;')) as m(text)
    order by m.text collate "C"$$,
  $$values ('![logo](https://x.example/l.png)', 'a link ([text](address))'),
           ('<B>Bold</B>', 'HTML tags (<b>, <br>)'),
           ('Ben &amp; Jerry', 'HTML entities (&amp;)'),
           ('Get the **popular sites**.', 'bold (**text**)'),
           (E'Intro\n## Parameters', 'a heading (# ...)'),
           ('Line one<br>line two', 'HTML tags (<b>, <br>)'),
           ('Pass `tournId`.', 'code (`text`)'),
           ('Quote &#39;x&#39;', 'HTML entities (&amp;)'),
           ('Returns *json* or *xml*.', 'emphasis (*text*)'),
           ('See [the docs](https://x.example/docs).', 'a link ([text](address))'),
           (E'```\ncurl x\n```', 'a code fence (```)'),
           (E'| a | b |\n|---|:---:|', 'a table (|---|)')$$,
  'markup: code fences, headings, tables, links and images, bold, emphasis, code, HTML tags and entities');
select results_eq(
  $$select m.text, payrail._markup_in_words(m.text)
    from (values (E'Notes:\n- one\n- two\n* three\n1. four'), ('Docs: https://x.example/a_b?c=d#e'), ('Costs 5 * 3 credits, 2*x per call'),
                 ('Pass snake_case or __init__ names'), ('Authorization: Bearer <token>'), ('#1 in sales, # of items'),
                 ('a|b|c and ---'), ('An array [1, 2] (sorted)'), ('Tom & Jerry &co')) as m(text)
    order by m.text collate "C"$$,
  $$values ('#1 in sales, # of items', null::text), ('An array [1, 2] (sorted)', null), ('Authorization: Bearer <token>', null),
           ('Costs 5 * 3 credits, 2*x per call', null), ('Docs: https://x.example/a_b?c=d#e', null),
           (E'Notes:\n- one\n- two\n* three\n1. four', null), ('Pass snake_case or __init__ names', null),
           ('Tom & Jerry &co', null), ('a|b|c and ---', null)$$,
  'markup: lists, URLs written out, a lone *, underscores, <placeholders>, a # without a heading, pipes and brackets are plain text');
select results_eq(
  $$select code, advice from payrail.advise_provider_method('Acme', 'Geocode',
      E'Purpose: Turn a street address into map coordinates.\nInstructions: Get the **key** first, see [docs](https://x.example).\nNotes: Free.', 'https://docs.acme.example')$$,
  $$values ('markup', 'The guidance is written in Markdown or HTML: a link ([text](address)), bold (**text**). Agents read it as plain text, marks and all.')$$,
  'markup: one piece of advice, naming every kind found, in order');
select results_eq(
  $$select code from payrail.advise_provider_method('Acme', 'Geocode', (select guidance from fits), null)$$,
  $$values ('no_docs_url')$$,
  'no_docs_url: a record without a docs URL');
select results_eq(
  $$select code from payrail.advise_provider_method('Acme', 'Geocode', 'See [docs](https://x.example)', null)$$,
  $$values ('no_purpose'), ('no_instructions'), ('no_notes'), ('markup'), ('no_docs_url')$$,
  'every piece of advice a record gets, at once, in the order of the kinds');
select is_empty(
  $$select * from payrail.advise_provider_method('Acme', 'Geocode', (select guidance from fits), 'https://docs.acme.example')
    where advice is null or fix is null or advice !~ '\.$'$$,
  'every piece of advice comes in words, a sentence, with what to do');

-- Stored records, drafts included, every one or a set; advice never refuses a save.
select payrail.set_embedding_model('test-model', 3);
select lives_ok(
  $$insert into payrail.provider_methods (provider, method, guidance, docs_url) values
      ('Acme', 'Geocode', (select guidance from fits), 'https://docs.acme.example'),
      ('Beta', 'Bare', 'Returns **all** of it', null)$$,
  'a record that gets every piece of advice is saved all the same: advice is never a rule');
-- Enabled, with a vector of its content.
insert into payrail.provider_methods (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash)
values ('Acme', 'Vague', E'Purpose: Geo info\nInstructions: GET.\nNotes: Free.', true, '[1,0,0]', 'test-model',
        payrail._content_hash('Acme', 'Vague', E'Purpose: Geo info\nInstructions: GET.\nNotes: Free.'));
select results_eq(
  $$select provider, method, enabled, code from payrail.advise_provider_methods()$$,
  $$values ('Acme', 'Vague', true, 'vague_purpose'), ('Acme', 'Vague', true, 'no_docs_url'),
           ('Beta', 'Bare', false, 'no_purpose'), ('Beta', 'Bare', false, 'no_instructions'), ('Beta', 'Bare', false, 'no_notes'),
           ('Beta', 'Bare', false, 'markup'), ('Beta', 'Bare', false, 'no_docs_url')$$,
  'advise_provider_methods: every record''s advice, drafts included, by provider and method, each record''s in the kinds'' order');
select results_eq(
  $$select record_id, code from payrail.advise_provider_methods(array[(select id from payrail.provider_methods where method = 'Vague'),
                                                                     (select id from payrail.provider_methods where method = 'Vague'),
                                                                     (select id from payrail.provider_methods where method = 'Geocode'), -1])$$,
  $$select id, c.code from payrail.provider_methods, (values (1, 'vague_purpose'), (2, 'no_docs_url')) as c(n, code) where method = 'Vague' order by c.n$$,
  'advise_provider_methods: those of a set of ids, each once; an id no record has gives nothing');
select is_empty($$select * from payrail.advise_provider_methods('{}')$$, 'advise_provider_methods: an empty set gives nothing');
select results_eq(
  $$select code, enabled, drafts from payrail.count_template_advice()$$,
  $$values ('no_purpose', 0::bigint, 1::bigint), ('vague_purpose', 1, 0), ('no_instructions', 0, 1), ('no_notes', 0, 1), ('markup', 0, 1), ('no_docs_url', 1, 1)$$,
  'count_template_advice: every kind, zero included, enabled and drafts apart');
select results_eq(
  $$select code, enabled, drafts from payrail.count_template_advice(array(select id from payrail.provider_methods where provider = 'Acme'))$$,
  $$values ('no_purpose', 0::bigint, 0::bigint), ('vague_purpose', 1, 0), ('no_instructions', 0, 0), ('no_notes', 0, 0), ('markup', 0, 0), ('no_docs_url', 1, 0)$$,
  'count_template_advice: over a set of records');
select is(
  (select summary || ': ' || fix from payrail.count_template_advice() where code = 'no_purpose'),
  (select summary || ': ' || fix from payrail.get_template_advice_kinds() where code = 'no_purpose'),
  'count_template_advice: each count with the kind''s summary and what to do');

-- Search never reads advice: no function, constraint or trigger but the advice's own calls these.
select is_empty(
  $$select p.proname from pg_catalog.pg_proc as p
    where p.pronamespace = 'payrail'::regnamespace
      and p.prosrc ~ '(advise_provider_method|_markup_in_words|_vague_purpose_in_words|_template_word|get_template_advice_kinds)'
      and p.proname not in ('advise_provider_method', 'advise_provider_methods', 'count_template_advice', '_vague_purpose_in_words')$$,
  'no function but the advice''s own calls the advice functions: search and the write path never do');
select is_empty(
  $$select c.conname from pg_catalog.pg_constraint as c
    where c.connamespace = 'payrail'::regnamespace and pg_catalog.pg_get_constraintdef(c.oid) ~ '(advise|_markup_in_words|_template_word)'$$,
  'no constraint calls the advice functions: advice refuses nothing');

-- Operators and the embedder read advice; agents never (it would tell them of drafts).
set local role payrail_operator;
select lives_ok($$select * from payrail.advise_provider_methods()$$, 'operator: reads the advice on every record');
select lives_ok($$select * from payrail.count_template_advice()$$, 'operator: counts it');
select lives_ok($$select * from payrail.advise_provider_method('A', 'B', 'C', null)$$, 'operator: asks it of a record not saved');
reset role;
set local role payrail_embedder;
select lives_ok($$select * from payrail.advise_provider_methods()$$, 'embedder: reads the advice (it reads every record''s content anyway)');
reset role;
set local role payrail_agent;
select throws_ok($$select * from payrail.advise_provider_methods()$$, '42501', null, 'agent: cannot read the advice on records');
select throws_ok($$select * from payrail.count_template_advice()$$, '42501', null, 'agent: cannot count it');
select throws_ok($$select * from payrail.advise_provider_method('A', 'B', 'C', null)$$, '42501', null, 'agent: cannot ask it of fields');
select throws_ok($$select * from payrail.get_template_advice_kinds()$$, '42501', null, 'agent: cannot list its kinds');
select throws_ok($$select payrail._markup_in_words('x')$$, '42501', null, 'agent: cannot call its helpers');
reset role;

-- Comments for psql's \df+, as on every function of the registry.
select is_empty(
  $$select p.proname from pg_catalog.pg_proc as p
    where p.pronamespace = 'payrail'::regnamespace
      and p.proname in ('get_template_advice_kinds', 'advise_provider_method', 'advise_provider_methods', 'count_template_advice',
                        '_template_words', '_template_word_count', '_vague_purpose_in_words', '_markup_in_words')
      and pg_catalog.obj_description(p.oid, 'pg_proc') is null$$,
  'every advice function has a comment');
select is(
  (select pg_catalog.count(*)::int from pg_catalog.pg_proc as p
   where p.pronamespace = 'payrail'::regnamespace
     and p.proname in ('get_template_advice_kinds', 'advise_provider_method', 'advise_provider_methods', 'count_template_advice',
                       '_template_words', '_template_word_count', '_vague_purpose_in_words', '_markup_in_words')),
  8, 'one of each advice function: no overload left behind');

select * from finish();
rollback;
