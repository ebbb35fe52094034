"""Every prompt the pipeline sends, written for this project. Delimiters are parameters.

Each prompt states its output format exactly; the parsers in `parsing.py` (records, yes/no,
numbered answers) and `reports.py` (JSON) read those formats, and are tested against messy
variants of them.
"""

from graphrag_pipeline.settings import default as setting_default

TUPLE_DELIMITER = "<|>"
RECORD_DELIMITER = "##"
COMPLETION_DELIMITER = "<|COMPLETE|>"
DEFAULT_ENTITY_TYPES = setting_default("GRAPHRAG_ENTITY_TYPES")
DEFAULT_LANGUAGE = setting_default("GRAPHRAG_LANGUAGE")

# -- extraction: light (LightRAG-style: keywords, 1-10 strength, content keywords) -------------
LIGHT_EXTRACTION = """You build a knowledge graph from text.

Task
Read the TEXT below. Find every named entity of the listed types and every relation between two
of those entities that the text states or clearly implies. Write the output in {language}; keep
names in the language and script in which the text writes them.

Entity types: {entity_types}

Output format (follow it exactly)
1. One record per entity:
("entity"{tuple_delimiter}<name>{tuple_delimiter}<type>{tuple_delimiter}<description>)
   - name: the entity's name as it appears in the text, capitalised
   - type: one of the entity types above
   - description: what the text tells about the entity (one or two sentences)
2. One record per relation between two entities found in step 1:
("relationship"{tuple_delimiter}<source>{tuple_delimiter}<target>{tuple_delimiter}<description>{tuple_delimiter}<keywords>{tuple_delimiter}<strength>)
   - source, target: names exactly as written in step 1
   - description: how the two are related, according to the text
   - keywords: a few comma-separated words that summarise the relation
   - strength: an integer from 1 (weak) to 10 (strong)
3. One record with the main themes of the whole text:
("content_keywords"{tuple_delimiter}<comma-separated keywords>)
Separate records with {record_delimiter} and write {completion_delimiter} after the last one.

Example
TEXT: The Royal Society elected Charles Darwin a fellow in 1839, three years after the Beagle returned to Falmouth.
OUTPUT:
("entity"{tuple_delimiter}Royal Society{tuple_delimiter}organization{tuple_delimiter}Learned society in London that elected Darwin a fellow in 1839){record_delimiter}
("entity"{tuple_delimiter}Charles Darwin{tuple_delimiter}person{tuple_delimiter}Naturalist elected a fellow of the Royal Society in 1839){record_delimiter}
("entity"{tuple_delimiter}Beagle{tuple_delimiter}category{tuple_delimiter}Ship whose voyage ended at Falmouth in 1836){record_delimiter}
("entity"{tuple_delimiter}Falmouth{tuple_delimiter}geo{tuple_delimiter}Port where the Beagle returned){record_delimiter}
("relationship"{tuple_delimiter}Royal Society{tuple_delimiter}Charles Darwin{tuple_delimiter}The society elected Darwin a fellow in 1839{tuple_delimiter}election, fellowship{tuple_delimiter}8){record_delimiter}
("relationship"{tuple_delimiter}Beagle{tuple_delimiter}Falmouth{tuple_delimiter}The Beagle ended its voyage at Falmouth{tuple_delimiter}voyage, return{tuple_delimiter}6){record_delimiter}
("content_keywords"{tuple_delimiter}scientific recognition, voyage){completion_delimiter}

TEXT:
{input_text}
OUTPUT:
"""

LIGHT_CONTINUE = """Some entities and relations in the text were not in your answer. Add only the missing ones, in the same record format, ending with {completion_delimiter}."""

LIGHT_IF_LOOP = """Could entities or relations from the text still be missing from your answers? Reply with the single word yes or no."""

# -- extraction: general (Microsoft GraphRAG-style: no keywords, gleaning with a forced YES/NO) -
GENERAL_EXTRACTION = """Goal
From the TEXT, identify all entities of the given types and all relationships among them.
Write descriptions in {language}; keep names as the text spells them.

Entity types: {entity_types}

Steps
1. For each entity write:
("entity"{tuple_delimiter}<entity_name>{tuple_delimiter}<entity_type>{tuple_delimiter}<entity_description>)
   entity_name is capitalised; entity_type is one of the types above; entity_description covers
   the entity's attributes and activities as the text describes them.
2. For each pair of entities from step 1 that are clearly related write:
("relationship"{tuple_delimiter}<source_entity>{tuple_delimiter}<target_entity>{tuple_delimiter}<relationship_description>{tuple_delimiter}<relationship_strength>)
   relationship_description explains why they are related; relationship_strength is a number
   from 1 to 10.
3. Put {record_delimiter} between records.
4. Finish with {completion_delimiter}.

Example
TEXT: Ada Lovelace translated Luigi Menabrea's paper on the Analytical Engine designed by Charles Babbage.
OUTPUT:
("entity"{tuple_delimiter}Ada Lovelace{tuple_delimiter}person{tuple_delimiter}Translator of Menabrea's paper on the Analytical Engine){record_delimiter}
("entity"{tuple_delimiter}Luigi Menabrea{tuple_delimiter}person{tuple_delimiter}Author of a paper on the Analytical Engine){record_delimiter}
("entity"{tuple_delimiter}Analytical Engine{tuple_delimiter}category{tuple_delimiter}Calculating machine designed by Charles Babbage){record_delimiter}
("entity"{tuple_delimiter}Charles Babbage{tuple_delimiter}person{tuple_delimiter}Designer of the Analytical Engine){record_delimiter}
("relationship"{tuple_delimiter}Ada Lovelace{tuple_delimiter}Luigi Menabrea{tuple_delimiter}Lovelace translated Menabrea's paper{tuple_delimiter}7){record_delimiter}
("relationship"{tuple_delimiter}Charles Babbage{tuple_delimiter}Analytical Engine{tuple_delimiter}Babbage designed the engine{tuple_delimiter}9){completion_delimiter}

TEXT:
{input_text}
OUTPUT:
"""

GENERAL_CONTINUE = (
    "MANY entities and relationships were missed in the last extraction. Add them below using the same format:\n"
)

GENERAL_LOOP = "It appears some entities and relationships may have still been missed. Answer YES if there are still entities or relationships to add, or NO if there are none. Answer with a single word."

# -- description summaries --------------------------------------------------------------------
SUMMARIZE_DESCRIPTIONS = """You merge several descriptions of the same {kind} into one.

{kind_title}: {name}
Descriptions:
{description_list}

Write one coherent description in {language}, in the third person, that keeps every fact above
and resolves contradictions if possible. Name the {kind} so the text stands on its own. Answer
with the description only, at most {max_words} words.
"""

# -- entity resolution ------------------------------------------------------------------------
ENTITY_RESOLUTION = """You decide whether two names refer to the same real-world {entity_type}.

Judge by what the names denote, not by spelling: ignore case, punctuation, articles and
honorifics; an abbreviation, acronym, nickname or translation of a name refers to the same
thing; different numbers, versions, places or people are different things.

Examples
Question 1: Is the {example_type} "television" the same as "TV"?
Question 2: Is the {example_type} "Chicago" the same as "Chitown"?
Question 3: Is the {example_type} "iPhone 14" the same as "iPhone 15"?
Answers:
For Question 1, "television" and "TV" are the same {example_type}.{record_delimiter}
For Question 2, "Chicago" and "Chitown" are the same {example_type}.{record_delimiter}
For Question 3, "iPhone 14" and "iPhone 15" are different {example_type}s.{record_delimiter}

Real data
{questions}

Answer every question, in order, one line each, in exactly the form
"For Question N, "A" and "B" are the same {entity_type}." or
"For Question N, "A" and "B" are different {entity_type}s."
separated by {record_delimiter}.
Answers:
"""

RESOLUTION_QUESTION = 'Question {index}: Is the {entity_type} "{a}" the same as "{b}"?'

# -- community reports ------------------------------------------------------------------------
COMMUNITY_REPORT = """You write a report about one community of a knowledge graph: a group of
closely connected entities and the relations among them, listed below as CSV tables.

Report structure (a JSON object, nothing else):
{{
  "title": "<short specific name of the community, naming its key entities>",
  "summary": "<executive summary: what the community is about and how its entities connect>",
  "rating": <float from 0 to 10: how important or influential the community is>,
  "rating_explanation": "<one sentence explaining the rating>",
  "findings": [
    {{"summary": "<one insight>", "explanation": "<a paragraph grounded in the data below>"}}
  ]
}}
Give 3 to 8 findings. Use only facts found in the data; do not invent any. Write in {language}.

Entities
{entities}

Relations
{relations}
{sub_reports}
Answer with the JSON object only.
"""

# -- query ------------------------------------------------------------------------------------
QUERY_REWRITE = """You analyse a question for a knowledge-graph search.

Return a JSON object with two lists:
- "answer_type_keywords": up to 3 entity types the answer would be, chosen ONLY from the type
  pool below (most likely first);
- "entities_from_query": up to 5 specific names, things or details that appear in the question
  itself (copied from the question, not invented).

Type pool (type -> sample entities from the index):
{type_pool}

Example
Question: Which university did Alan Turing attend?
Output: {{"answer_type_keywords": ["ORGANIZATION"], "entities_from_query": ["Alan Turing", "university"]}}

Question: {question}
Output:
"""

LOCAL_ANSWER = """Answer the question using only the knowledge-graph context below (entities,
relations, community reports and source passages). If the context does not contain the answer,
say so. Be concise, and answer in the language of the question. After each statement, cite the
sources it rests on exactly as the context writes them, e.g. [doc: notes/a.txt, chunk 3] or
[doc: notes/a.txt]; cite only sources that appear in the context.

Context
{context}

Question: {question}
Answer:
"""

GLOBAL_MAP = """You are given one community report from a knowledge graph. List the points in it
that help answer the question, each with an importance score from 0 (useless) to 100 (essential).

Report
{report}

Question: {question}

Answer with a JSON object only: {{"points": [{{"description": "<point>", "score": <0-100>}}]}}.
If nothing in the report helps, answer {{"points": []}}.
"""

GLOBAL_REDUCE = """Answer the question from the analysts' points below, which were drawn from
community reports of a knowledge graph and ranked by importance. Merge them into one coherent
answer, drop what is irrelevant, and say so if they do not answer the question. Answer in the
language of the question. Cite the sources given with the points you use exactly as written, e.g.
[doc: notes/a.txt].

Points
{points}

Question: {question}
Answer:
"""


# -- which texts each step sends: their hash is part of cache keys and code versions -------------
EXTRACTION_TEXTS = {
    "light": ("LIGHT_EXTRACTION", "LIGHT_CONTINUE", "LIGHT_IF_LOOP"),
    "general": ("GENERAL_EXTRACTION", "GENERAL_CONTINUE", "GENERAL_LOOP"),
}
FORMAT_TEXTS = ("TUPLE_DELIMITER", "RECORD_DELIMITER", "COMPLETION_DELIMITER")


def texts_digest(names, extra: str | None = None) -> str:
    """A short hash of the named texts of this module (and ``extra``, e.g. the language they are
    filled with): a changed prompt gives another hash."""
    import hashlib
    import json

    texts = {name: globals()[name] for name in names}
    if extra is not None:
        texts["\x00extra"] = extra
    return hashlib.sha256(json.dumps(texts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:10]


def extraction_digest(method: str) -> str:
    """The hash of the texts an extraction method sends (`fast` sends none: "")."""
    return texts_digest(EXTRACTION_TEXTS[method] + FORMAT_TEXTS) if method in EXTRACTION_TEXTS else ""
