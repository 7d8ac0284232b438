-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- Immutable helpers that the table's constraints, generated column and indexes use,
-- so they are created before the table.

-- The name keys of the indexes below are computed by these functions: when a rerun changes one
-- (a new version of db/), the end of this file rebuilds the indexes that use them. What they are
-- now, before this file replaces them:
do $$
begin
  perform pg_catalog.set_config('payrail.text_rules_before', '', false);
  if pg_catalog.to_regprocedure('payrail._text_rules_fingerprint()') is not null then
    perform pg_catalog.set_config('payrail.text_rules_before', payrail._text_rules_fingerprint(), false);
  end if;
end
$$;

create or replace function payrail._text_rules_fingerprint()
returns text
language sql
stable
security invoker
set search_path from current
return (select pg_catalog.md5(pg_catalog.string_agg(pg_catalog.pg_get_functiondef(p.oid), ',' order by p.oid::pg_catalog.regprocedure::text))
        from pg_catalog.pg_proc as p
        where p.pronamespace operator(pg_catalog.=) 'payrail'::pg_catalog.regnamespace and p.provolatile operator(pg_catalog.=) 'i');

comment on function payrail._text_rules_fingerprint() is
$$A digest of every immutable function of the registry: what the expression indexes' keys are computed by.$$;

create or replace function payrail._white_space_characters()
returns text
language sql
immutable parallel safe
security invoker
set search_path from current
-- The one definition of white space, for every rule that trims, collapses or refuses it:
-- Unicode's White_Space but U+0085 (a control character, which every field refuses), and U+FEFF
-- (the byte order mark some editors put in front of text; invisible too). Spelt out because \s
-- and [[:space:]] follow the server's locale (ASCII only in C; no U+00A0, U+2007 or U+202F in
-- glibc's C.UTF-8). Zero-width spaces and joiners, the word joiner and U+180E are no white space
-- but invisible characters (_invisible_characters). search.QUERY_WHITE_SPACE is the Python copy;
-- tests/sql/test_text_rules.py checks both against Unicode's White_Space, character by character.
return E'\t\n\u000b\u000c\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff';

comment on function payrail._white_space_characters() is
$$The white space characters: Unicode's White_Space but U+0085 (a control character), and U+FEFF (the byte order mark).

The characters themselves, for btrim() and inside a regular expression's brackets. Every rule
counts white space by it: trimmed (payrail._trim_white_space, payrail._canonical_name),
collapsed (payrail._normalize_name), refused in URLs (payrail._is_https_url) and ignored in a
query (payrail._is_blank).$$;

create or replace function payrail._invisible_characters()
returns text
language sql
immutable parallel safe
security invoker
set search_path from current
-- Unicode's Default_Ignorable_Code_Point: characters that display as nothing (zero-width
-- spaces and joiners, bidi controls, variation selectors, tag characters, fillers), so a name
-- or URL that holds one is not what it looks like. search.QUERY_INVISIBLE mirrors it;
-- tests/sql/test_text_rules.py checks both against the regex module's \p{Default_Ignorable_Code_Point}.
return '\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff';

comment on function payrail._invisible_characters() is
$$The invisible format characters (Unicode's Default_Ignorable_Code_Point), as the inside of a regular expression bracket.

Refused in provider, method and URLs; ignored when names are compared and when a query is judged empty.$$;

create or replace function payrail._is_blank(p_text text)
returns boolean
language sql
immutable strict parallel safe
security invoker
set search_path from current
return p_text operator(pg_catalog.!~) ('[^' operator(pg_catalog.||) payrail._white_space_characters() operator(pg_catalog.||) payrail._invisible_characters() operator(pg_catalog.||) ']');

comment on function payrail._is_blank(text) is
$$True when the text holds nothing but white space and invisible characters (or nothing): what an empty query is.$$;

create or replace function payrail._fold_case(p_text text)
returns text
language sql
immutable strict parallel safe
security invoker
set search_path from current
-- Unicode's simple case folding (CaseFolding.txt, statuses C and S), one character for one, in
-- every locale and on every PostgreSQL version (lower() follows the database's locale: ASCII
-- only in C; casefold() came with PostgreSQL 18). tests/sql/test_text_rules.py checks the table
-- against Python's str.casefold() and prints it anew when Unicode changes.
-- translate() scans its whole table for every character of the text (0.1 ms a name), so text
-- of ASCII only, nearly every name, folds through the table's first 26 entries alone.
return case
  when p_text operator(pg_catalog.~) '[^\u0001-\u007f]' then pg_catalog.translate(
    p_text,
    'ABCDEFGHIJKLMNOPQRSTUVWXYZµÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÐÑÒÓÔÕÖØÙÚÛÜÝÞĀĂĄĆĈĊČĎĐĒĔĖĘĚĜĞĠĢĤĦĨĪĬĮĲĴĶĹĻĽĿŁŃŅŇŊŌŎŐŒŔŖŘŚŜŞŠŢŤŦŨŪŬŮŰŲŴŶŸŹŻŽſƁƂƄƆƇƉƊƋƎƏƐƑƓƔƖƗƘƜƝƟƠƢƤƦƧƩƬƮƯƱƲƳƵƷƸƼǄǅǇǈǊǋǍǏǑǓǕǗǙǛǞǠǢǤǦǨǪǬǮǱǲǴǶǷǸǺǼǾȀȂȄȆȈȊȌȎȐȒȔȖȘȚȜȞȠȢȤȦȨȪȬȮȰȲȺȻȽȾɁɃɄɅɆɈɊɌɎͅͰͲͶͿΆΈΉΊΌΎΏΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩΪΫςϏϐϑϕϖϘϚϜϞϠϢϤϦϨϪϬϮϰϱϴϵϷϹϺϽϾϿЀЁЂЃЄЅІЇЈЉЊЋЌЍЎЏАБВГДЕЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯѠѢѤѦѨѪѬѮѰѲѴѶѸѺѼѾҀҊҌҎҐҒҔҖҘҚҜҞҠҢҤҦҨҪҬҮҰҲҴҶҸҺҼҾӀӁӃӅӇӉӋӍӐӒӔӖӘӚӜӞӠӢӤӦӨӪӬӮӰӲӴӶӸӺӼӾԀԂԄԆԈԊԌԎԐԒԔԖԘԚԜԞԠԢԤԦԨԪԬԮԱԲԳԴԵԶԷԸԹԺԻԼԽԾԿՀՁՂՃՄՅՆՇՈՉՊՋՌՍՎՏՐՑՒՓՔՕՖႠႡႢႣႤႥႦႧႨႩႪႫႬႭႮႯႰႱႲႳႴႵႶႷႸႹႺႻႼႽႾႿჀჁჂჃჄჅჇჍᏸᏹᏺᏻᏼᏽᲀᲁᲂᲃᲄᲅᲆᲇᲈᲐᲑᲒᲓᲔᲕᲖᲗᲘᲙᲚᲛᲜᲝᲞᲟᲠᲡᲢᲣᲤᲥᲦᲧᲨᲩᲪᲫᲬᲭᲮᲯᲰᲱᲲᲳᲴᲵᲶᲷᲸᲹᲺᲽᲾᲿḀḂḄḆḈḊḌḎḐḒḔḖḘḚḜḞḠḢḤḦḨḪḬḮḰḲḴḶḸḺḼḾṀṂṄṆṈṊṌṎṐṒṔṖṘṚṜṞṠṢṤṦṨṪṬṮṰṲṴṶṸṺṼṾẀẂẄẆẈẊẌẎẐẒẔẛẞẠẢẤẦẨẪẬẮẰẲẴẶẸẺẼẾỀỂỄỆỈỊỌỎỐỒỔỖỘỚỜỞỠỢỤỦỨỪỬỮỰỲỴỶỸỺỼỾἈἉἊἋἌἍἎἏἘἙἚἛἜἝἨἩἪἫἬἭἮἯἸἹἺἻἼἽἾἿὈὉὊὋὌὍὙὛὝὟὨὩὪὫὬὭὮὯᾈᾉᾊᾋᾌᾍᾎᾏᾘᾙᾚᾛᾜᾝᾞᾟᾨᾩᾪᾫᾬᾭᾮᾯᾸᾹᾺΆᾼιῈΈῊΉῌῘῙῚΊῨῩῪΎῬῸΌῺΏῼΩKÅℲⅠⅡⅢⅣⅤⅥⅦⅧⅨⅩⅪⅫⅬⅭⅮⅯↃⒶⒷⒸⒹⒺⒻⒼⒽⒾⒿⓀⓁⓂⓃⓄⓅⓆⓇⓈⓉⓊⓋⓌⓍⓎⓏⰀⰁⰂⰃⰄⰅⰆⰇⰈⰉⰊⰋⰌⰍⰎⰏⰐⰑⰒⰓⰔⰕⰖⰗⰘⰙⰚⰛⰜⰝⰞⰟⰠⰡⰢⰣⰤⰥⰦⰧⰨⰩⰪⰫⰬⰭⰮⰯⱠⱢⱣⱤⱧⱩⱫⱭⱮⱯⱰⱲⱵⱾⱿⲀⲂⲄⲆⲈⲊⲌⲎⲐⲒⲔⲖⲘⲚⲜⲞⲠⲢⲤⲦⲨⲪⲬⲮⲰⲲⲴⲶⲸⲺⲼⲾⳀⳂⳄⳆⳈⳊⳌⳎⳐⳒⳔⳖⳘⳚⳜⳞⳠⳢⳫⳭⳲꙀꙂꙄꙆꙈꙊꙌꙎꙐꙒꙔꙖꙘꙚꙜꙞꙠꙢꙤꙦꙨꙪꙬꚀꚂꚄꚆꚈꚊꚌꚎꚐꚒꚔꚖꚘꚚꜢꜤꜦꜨꜪꜬꜮꜲꜴꜶꜸꜺꜼꜾꝀꝂꝄꝆꝈꝊꝌꝎꝐꝒꝔꝖꝘꝚꝜꝞꝠꝢꝤꝦꝨꝪꝬꝮꝹꝻꝽꝾꞀꞂꞄꞆꞋꞍꞐꞒꞖꞘꞚꞜꞞꞠꞢꞤꞦꞨꞪꞫꞬꞭꞮꞰꞱꞲꞳꞴꞶꞸꞺꞼꞾꟀꟂꟄꟅꟆꟇꟉꟐꟖꟘꟵꭰꭱꭲꭳꭴꭵꭶꭷꭸꭹꭺꭻꭼꭽꭾꭿꮀꮁꮂꮃꮄꮅꮆꮇꮈꮉꮊꮋꮌꮍꮎꮏꮐꮑꮒꮓꮔꮕꮖꮗꮘꮙꮚꮛꮜꮝꮞꮟꮠꮡꮢꮣꮤꮥꮦꮧꮨꮩꮪꮫꮬꮭꮮꮯꮰꮱꮲꮳꮴꮵꮶꮷꮸꮹꮺꮻꮼꮽꮾꮿＡＢＣＤＥＦＧＨＩＪＫＬＭＮＯＰＱＲＳＴＵＶＷＸＹＺ𐐀𐐁𐐂𐐃𐐄𐐅𐐆𐐇𐐈𐐉𐐊𐐋𐐌𐐍𐐎𐐏𐐐𐐑𐐒𐐓𐐔𐐕𐐖𐐗𐐘𐐙𐐚𐐛𐐜𐐝𐐞𐐟𐐠𐐡𐐢𐐣𐐤𐐥𐐦𐐧𐒰𐒱𐒲𐒳𐒴𐒵𐒶𐒷𐒸𐒹𐒺𐒻𐒼𐒽𐒾𐒿𐓀𐓁𐓂𐓃𐓄𐓅𐓆𐓇𐓈𐓉𐓊𐓋𐓌𐓍𐓎𐓏𐓐𐓑𐓒𐓓𐕰𐕱𐕲𐕳𐕴𐕵𐕶𐕷𐕸𐕹𐕺𐕼𐕽𐕾𐕿𐖀𐖁𐖂𐖃𐖄𐖅𐖆𐖇𐖈𐖉𐖊𐖌𐖍𐖎𐖏𐖐𐖑𐖒𐖔𐖕𐲀𐲁𐲂𐲃𐲄𐲅𐲆𐲇𐲈𐲉𐲊𐲋𐲌𐲍𐲎𐲏𐲐𐲑𐲒𐲓𐲔𐲕𐲖𐲗𐲘𐲙𐲚𐲛𐲜𐲝𐲞𐲟𐲠𐲡𐲢𐲣𐲤𐲥𐲦𐲧𐲨𐲩𐲪𐲫𐲬𐲭𐲮𐲯𐲰𐲱𐲲𑢠𑢡𑢢𑢣𑢤𑢥𑢦𑢧𑢨𑢩𑢪𑢫𑢬𑢭𑢮𑢯𑢰𑢱𑢲𑢳𑢴𑢵𑢶𑢷𑢸𑢹𑢺𑢻𑢼𑢽𑢾𑢿𖹀𖹁𖹂𖹃𖹄𖹅𖹆𖹇𖹈𖹉𖹊𖹋𖹌𖹍𖹎𖹏𖹐𖹑𖹒𖹓𖹔𖹕𖹖𖹗𖹘𖹙𖹚𖹛𖹜𖹝𖹞𖹟𞤀𞤁𞤂𞤃𞤄𞤅𞤆𞤇𞤈𞤉𞤊𞤋𞤌𞤍𞤎𞤏𞤐𞤑𞤒𞤓𞤔𞤕𞤖𞤗𞤘𞤙𞤚𞤛𞤜𞤝𞤞𞤟𞤠𞤡',
    'abcdefghijklmnopqrstuvwxyzμàáâãäåæçèéêëìíîïðñòóôõöøùúûüýþāăąćĉċčďđēĕėęěĝğġģĥħĩīĭįĳĵķĺļľŀłńņňŋōŏőœŕŗřśŝşšţťŧũūŭůűųŵŷÿźżžsɓƃƅɔƈɖɗƌǝəɛƒɠɣɩɨƙɯɲɵơƣƥʀƨʃƭʈưʊʋƴƶʒƹƽǆǆǉǉǌǌǎǐǒǔǖǘǚǜǟǡǣǥǧǩǫǭǯǳǳǵƕƿǹǻǽǿȁȃȅȇȉȋȍȏȑȓȕȗșțȝȟƞȣȥȧȩȫȭȯȱȳⱥȼƚⱦɂƀʉʌɇɉɋɍɏιͱͳͷϳάέήίόύώαβγδεζηθικλμνξοπρστυφχψωϊϋσϗβθφπϙϛϝϟϡϣϥϧϩϫϭϯκρθεϸϲϻͻͼͽѐёђѓєѕіїјљњћќѝўџабвгдежзийклмнопрстуфхцчшщъыьэюяѡѣѥѧѩѫѭѯѱѳѵѷѹѻѽѿҁҋҍҏґғҕҗҙқҝҟҡңҥҧҩҫҭүұҳҵҷҹһҽҿӏӂӄӆӈӊӌӎӑӓӕӗәӛӝӟӡӣӥӧөӫӭӯӱӳӵӷӹӻӽӿԁԃԅԇԉԋԍԏԑԓԕԗԙԛԝԟԡԣԥԧԩԫԭԯաբգդեզէըթժիլխծկհձղճմյնշոչպջռսվտրցւփքօֆⴀⴁⴂⴃⴄⴅⴆⴇⴈⴉⴊⴋⴌⴍⴎⴏⴐⴑⴒⴓⴔⴕⴖⴗⴘⴙⴚⴛⴜⴝⴞⴟⴠⴡⴢⴣⴤⴥⴧⴭᏰᏱᏲᏳᏴᏵвдосттъѣꙋაბგდევზთიკლმნოპჟრსტუფქღყშჩცძწჭხჯჰჱჲჳჴჵჶჷჸჹჺჽჾჿḁḃḅḇḉḋḍḏḑḓḕḗḙḛḝḟḡḣḥḧḩḫḭḯḱḳḵḷḹḻḽḿṁṃṅṇṉṋṍṏṑṓṕṗṙṛṝṟṡṣṥṧṩṫṭṯṱṳṵṷṹṻṽṿẁẃẅẇẉẋẍẏẑẓẕṡßạảấầẩẫậắằẳẵặẹẻẽếềểễệỉịọỏốồổỗộớờởỡợụủứừửữựỳỵỷỹỻỽỿἀἁἂἃἄἅἆἇἐἑἒἓἔἕἠἡἢἣἤἥἦἧἰἱἲἳἴἵἶἷὀὁὂὃὄὅὑὓὕὗὠὡὢὣὤὥὦὧᾀᾁᾂᾃᾄᾅᾆᾇᾐᾑᾒᾓᾔᾕᾖᾗᾠᾡᾢᾣᾤᾥᾦᾧᾰᾱὰάᾳιὲέὴήῃῐῑὶίῠῡὺύῥὸόὼώῳωkåⅎⅰⅱⅲⅳⅴⅵⅶⅷⅸⅹⅺⅻⅼⅽⅾⅿↄⓐⓑⓒⓓⓔⓕⓖⓗⓘⓙⓚⓛⓜⓝⓞⓟⓠⓡⓢⓣⓤⓥⓦⓧⓨⓩⰰⰱⰲⰳⰴⰵⰶⰷⰸⰹⰺⰻⰼⰽⰾⰿⱀⱁⱂⱃⱄⱅⱆⱇⱈⱉⱊⱋⱌⱍⱎⱏⱐⱑⱒⱓⱔⱕⱖⱗⱘⱙⱚⱛⱜⱝⱞⱟⱡɫᵽɽⱨⱪⱬɑɱɐɒⱳⱶȿɀⲁⲃⲅⲇⲉⲋⲍⲏⲑⲓⲕⲗⲙⲛⲝⲟⲡⲣⲥⲧⲩⲫⲭⲯⲱⲳⲵⲷⲹⲻⲽⲿⳁⳃⳅⳇⳉⳋⳍⳏⳑⳓⳕⳗⳙⳛⳝⳟⳡⳣⳬⳮⳳꙁꙃꙅꙇꙉꙋꙍꙏꙑꙓꙕꙗꙙꙛꙝꙟꙡꙣꙥꙧꙩꙫꙭꚁꚃꚅꚇꚉꚋꚍꚏꚑꚓꚕꚗꚙꚛꜣꜥꜧꜩꜫꜭꜯꜳꜵꜷꜹꜻꜽꜿꝁꝃꝅꝇꝉꝋꝍꝏꝑꝓꝕꝗꝙꝛꝝꝟꝡꝣꝥꝧꝩꝫꝭꝯꝺꝼᵹꝿꞁꞃꞅꞇꞌɥꞑꞓꞗꞙꞛꞝꞟꞡꞣꞥꞧꞩɦɜɡɬɪʞʇʝꭓꞵꞷꞹꞻꞽꞿꟁꟃꞔʂᶎꟈꟊꟑꟗꟙꟶᎠᎡᎢᎣᎤᎥᎦᎧᎨᎩᎪᎫᎬᎭᎮᎯᎰᎱᎲᎳᎴᎵᎶᎷᎸᎹᎺᎻᎼᎽᎾᎿᏀᏁᏂᏃᏄᏅᏆᏇᏈᏉᏊᏋᏌᏍᏎᏏᏐᏑᏒᏓᏔᏕᏖᏗᏘᏙᏚᏛᏜᏝᏞᏟᏠᏡᏢᏣᏤᏥᏦᏧᏨᏩᏪᏫᏬᏭᏮᏯａｂｃｄｅｆｇｈｉｊｋｌｍｎｏｐｑｒｓｔｕｖｗｘｙｚ𐐨𐐩𐐪𐐫𐐬𐐭𐐮𐐯𐐰𐐱𐐲𐐳𐐴𐐵𐐶𐐷𐐸𐐹𐐺𐐻𐐼𐐽𐐾𐐿𐑀𐑁𐑂𐑃𐑄𐑅𐑆𐑇𐑈𐑉𐑊𐑋𐑌𐑍𐑎𐑏𐓘𐓙𐓚𐓛𐓜𐓝𐓞𐓟𐓠𐓡𐓢𐓣𐓤𐓥𐓦𐓧𐓨𐓩𐓪𐓫𐓬𐓭𐓮𐓯𐓰𐓱𐓲𐓳𐓴𐓵𐓶𐓷𐓸𐓹𐓺𐓻𐖗𐖘𐖙𐖚𐖛𐖜𐖝𐖞𐖟𐖠𐖡𐖣𐖤𐖥𐖦𐖧𐖨𐖩𐖪𐖫𐖬𐖭𐖮𐖯𐖰𐖱𐖳𐖴𐖵𐖶𐖷𐖸𐖹𐖻𐖼𐳀𐳁𐳂𐳃𐳄𐳅𐳆𐳇𐳈𐳉𐳊𐳋𐳌𐳍𐳎𐳏𐳐𐳑𐳒𐳓𐳔𐳕𐳖𐳗𐳘𐳙𐳚𐳛𐳜𐳝𐳞𐳟𐳠𐳡𐳢𐳣𐳤𐳥𐳦𐳧𐳨𐳩𐳪𐳫𐳬𐳭𐳮𐳯𐳰𐳱𐳲𑣀𑣁𑣂𑣃𑣄𑣅𑣆𑣇𑣈𑣉𑣊𑣋𑣌𑣍𑣎𑣏𑣐𑣑𑣒𑣓𑣔𑣕𑣖𑣗𑣘𑣙𑣚𑣛𑣜𑣝𑣞𑣟𖹠𖹡𖹢𖹣𖹤𖹥𖹦𖹧𖹨𖹩𖹪𖹫𖹬𖹭𖹮𖹯𖹰𖹱𖹲𖹳𖹴𖹵𖹶𖹷𖹸𖹹𖹺𖹻𖹼𖹽𖹾𖹿𞤢𞤣𞤤𞤥𞤦𞤧𞤨𞤩𞤪𞤫𞤬𞤭𞤮𞤯𞤰𞤱𞤲𞤳𞤴𞤵𞤶𞤷𞤸𞤹𞤺𞤻𞤼𞤽𞤾𞤿𞥀𞥁𞥂𞥃')
  else pg_catalog.translate(p_text, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')
end;

comment on function payrail._fold_case(text) is
$$Unicode simple case folding: every character with a case-folded form replaced by it, the same in every locale.$$;

create or replace function payrail._trim_white_space(p_text text)
returns text
language sql
immutable strict parallel safe
security invoker
set search_path from current
return pg_catalog.btrim(p_text, payrail._white_space_characters());

comment on function payrail._trim_white_space(text) is
$$Removes leading and trailing white space (payrail._white_space_characters).$$;

create or replace function payrail._canonical_name(p_name text)
returns text
language sql
immutable strict parallel safe
security invoker
set search_path from current
-- The white space that is no control character: a tab or line break at either end stays, and
-- _is_valid_name refuses the name, so it is never silently dropped.
return pg_catalog.normalize(
  pg_catalog.btrim(p_name, pg_catalog.regexp_replace(payrail._white_space_characters(), '[\u0001-\u001f]', '', 'g')),
  'NFC');

comment on function payrail._canonical_name(text) is
$$A provider or method name as it is stored: without the white space around it (but tabs and line breaks) and in Unicode NFC.

Applied by the trigger tg_provider_methods__canonicalize_names, and by the write path before it
embeds, so a vector is always made from the text that is stored.$$;

create or replace function payrail._normalize_name(p_name text)
returns text
language plpgsql
immutable strict parallel safe
security invoker
set search_path from current
-- NFKC before folding (compatibility forms fold as their plain letters) and after (a folded
-- letter may compose anew), as Unicode's NFKC_Casefold.
-- PL/pgSQL, not a SQL body: PostgreSQL before 18 sets up a SQL function's nested calls
-- (_fold_case) afresh on every call, 0.2 ms a name in every index entry, trigger and lookup;
-- PL/pgSQL keeps them for the transaction (10 us).
as $$
begin
  return pg_catalog.btrim(
    pg_catalog.regexp_replace(
      pg_catalog.normalize(
        payrail._fold_case(
          pg_catalog.normalize(pg_catalog.regexp_replace(p_name, '[' operator(pg_catalog.||) payrail._invisible_characters() operator(pg_catalog.||) ']', '', 'g'), 'NFKC')),
        'NFKC'),
      '[' operator(pg_catalog.||) payrail._white_space_characters() operator(pg_catalog.||) ']+', ' ', 'g'),
    ' ');
end;
$$;

comment on function payrail._normalize_name(text) is
$$Normalizes a name for comparison: NFKC, case-folded, invisible characters dropped, trimmed, runs of white space collapsed.

So "Ｓｔｒｉｐｅ", "STRIPE" and "stripe" are one name. Used by the (provider, method) uniqueness
rule, the search name path and every lookup by name.$$;

create or replace function payrail._content_hash(p_provider text, p_method text, p_guidance text)
returns bytea
language sql
immutable strict parallel safe
security invoker
set search_path from current
-- U+001F cannot occur in these fields (the control-character rules), so the join is unambiguous.
-- payrail_embedder never computes it: save_provider_method does, and sync reads the generated column.
return pg_catalog.sha256(pg_catalog.convert_to(p_provider operator(pg_catalog.||) E'\x1f' operator(pg_catalog.||) p_method operator(pg_catalog.||) E'\x1f' operator(pg_catalog.||) p_guidance, 'UTF8'));

comment on function payrail._content_hash(text, text, text) is
$$SHA-256 of the content an embedding is made from: provider, method and guidance.

An embedding is current only while its recorded content hash equals this.$$;

create or replace function payrail._is_valid_name(p_name text)
returns boolean
language sql
immutable strict parallel safe
security invoker
set search_path from current
-- Its comparison key (compatibility forms expand: U+FDFA is 18 letters) must fit the btree
-- indexes on names, pairs included: 1,200 bytes, where 120 letters of any script take at most 480.
-- Not BETWEEN: it is stored as an AND inside this AND, which a dump prints and its restore
-- flattens, so a restored registry would hold another definition (and db apply would then
-- rebuild the name indexes).
return pg_catalog.char_length(payrail._trim_white_space(p_name)) operator(pg_catalog.>=) 1
   and pg_catalog.char_length(payrail._trim_white_space(p_name)) operator(pg_catalog.<=) 120
   and p_name operator(pg_catalog.!~) '[\u0001-\u001f\u007f-\u009f]'
   and p_name operator(pg_catalog.!~) ('[' operator(pg_catalog.||) payrail._invisible_characters() operator(pg_catalog.||) ']')
   and pg_catalog.octet_length(payrail._normalize_name(p_name)) operator(pg_catalog.<=) 1200;

comment on function payrail._is_valid_name(text) is
$$True for a provider or method name: 1..120 characters after trimming, no control or invisible characters, a comparison key (payrail._normalize_name) of at most 1,200 bytes.$$;

create or replace function payrail._is_https_url(p_url text)
returns boolean
language sql
immutable strict parallel safe
security invoker
set search_path from current
-- An absolute https URL with a non-empty host and no user info (https://docs.example@evil.example/
-- goes to evil.example); no white space, control or invisible character anywhere.
return pg_catalog.char_length(p_url) operator(pg_catalog.<=) 2048
   and p_url operator(pg_catalog.~*) '^https://[^/?#@]+([/?#]|$)'
   and p_url operator(pg_catalog.!~) ('[\u0001-\u001f\u007f-\u009f' operator(pg_catalog.||) payrail._white_space_characters() operator(pg_catalog.||) payrail._invisible_characters() operator(pg_catalog.||) ']');

comment on function payrail._is_https_url(text) is
$$True for an absolute https:// URL of at most 2,048 characters with a host, no user info, and no white space, control or invisible character.$$;

create or replace function payrail._are_https_urls(p_urls text[])
returns boolean
language sql
immutable strict parallel safe
security invoker
set search_path from current
return not exists (select from pg_catalog.unnest(p_urls) as u(url) where not coalesce(payrail._is_https_url(u.url), false));

comment on function payrail._are_https_urls(text[]) is
$$True when every element of the array is a valid https URL (see _is_https_url) and none is NULL.$$;

create or replace function payrail._has_duplicates(p_values text[])
returns boolean
language sql
immutable strict parallel safe
security invoker
set search_path from current
return pg_catalog.cardinality(p_values) operator(pg_catalog.<>) (select pg_catalog.count(distinct v) from pg_catalog.unnest(p_values) as v);

comment on function payrail._has_duplicates(text[]) is
$$True when the array holds the same value twice.$$;

create or replace function payrail._rebuild_text_rule_dependents()
returns void
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_index pg_catalog.regclass;
  v_constraint record;
begin
  if payrail._text_rules_fingerprint() operator(pg_catalog.=) coalesce(pg_catalog.current_setting('payrail.text_rules_before', true), '') then
    return;
  end if;
  for v_index in
    select distinct d.objid::pg_catalog.regclass
    from pg_catalog.pg_depend as d
    join pg_catalog.pg_class as c on c.oid operator(pg_catalog.=) d.objid and c.relkind operator(pg_catalog.=) 'i'
    join pg_catalog.pg_proc as p on p.oid operator(pg_catalog.=) d.refobjid
    where d.classid operator(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
      and d.refclassid operator(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
      and p.pronamespace operator(pg_catalog.=) 'payrail'::pg_catalog.regnamespace
  loop
    -- REINDEX blocks the name path's lookups until it commits: db/CONVENTIONS.md, "Deploys".
    perform payrail._needs_exclusive_lock((select indrelid from pg_catalog.pg_index where indexrelid operator(pg_catalog.=) v_index),
                                          pg_catalog.format('the name rules changed, so index %s is rebuilt', v_index));
    execute pg_catalog.format('reindex index %s', v_index);
  end loop;
  for v_constraint in
    select distinct c.conrelid::pg_catalog.regclass as table_name, c.conname,
           pg_catalog.regexp_replace(pg_catalog.pg_get_constraintdef(c.oid), ' NOT VALID$', '') as definition
    from pg_catalog.pg_depend as d
    join pg_catalog.pg_constraint as c on c.oid operator(pg_catalog.=) d.objid and c.contype operator(pg_catalog.=) 'c'
    join pg_catalog.pg_proc as p on p.oid operator(pg_catalog.=) d.refobjid
    where d.classid operator(pg_catalog.=) 'pg_catalog.pg_constraint'::pg_catalog.regclass
      and d.refclassid operator(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
      and p.pronamespace operator(pg_catalog.=) 'payrail'::pg_catalog.regnamespace
  loop
    perform payrail._replace_check_constraint(v_constraint.table_name, v_constraint.conname, v_constraint.definition,
      pg_catalog.format('the name rules changed, so constraint %s checks every row again', v_constraint.conname));
  end loop;
  perform pg_catalog.set_config('payrail.text_rules_before', payrail._text_rules_fingerprint(), false);
end
$$;

comment on function payrail._rebuild_text_rule_dependents() is
$$Rebuilds the indexes whose keys the registry's immutable functions compute, and checks again the rows of the constraints that call them, when those functions changed since payrail.text_rules_before was noted.

Called at the end of each file that defines such functions (015-text_rules.sql,
018-lookalikes.sql, after 016-unicode_security.sql's data).$$;

-- Rebuild the indexes whose keys these functions compute, and check again the rows of the
-- constraints that call them, if this run changed any of them.
do $$ begin perform payrail._rebuild_text_rule_dependents(); end $$;
