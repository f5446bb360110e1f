"""The OpenAPI 3.1 document of the admin API (`/admin/v1`).

`document` builds it from the route table, the request models, the operation table and the error
table; what no code states is written by hand in `operations` (what each operation promises, its
parameters and errors) and `answers` (the schemas of its answers), both checked against a real
gateway's responses by the tests; `markdown` renders it for people (docs/admin-api.md).
"""
