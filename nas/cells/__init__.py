"""The cell: the op table (`ops`), its definition (`cell`: `first_node`, `highway`, `cell_step`, and
`FrozenRNN`, the layer over sequences), the search cell (`search_cell`: every edge's ops mixed), ESS's
gates (`gates`), NASABN's attention (`attention`), and the searched cell as a file (`genotype`)."""
