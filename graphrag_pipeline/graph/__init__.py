"""Graph: from per-document subgraphs to a resolved, clustered knowledge graph.

`tables` defines the node/edge tables and PageRank; `merge` and `mentions` merge the subgraphs
(incrementally: a changed document's old contribution out, its new one in); `summaries`
shortens long merged descriptions; `resolution` merges entities that name the same thing;
`communities` keeps hierarchical Leiden communities stable across updates, with
`frontier_leiden` moving only the changed frontier; `export` writes GraphML.
"""
