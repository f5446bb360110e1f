"""The OpenAPI 3.1 document of the admin API (`/admin/v1`).

`document` builds it from the route table, the request models and the error table; the parts no
code states (what each operation promises, its query parameters, the shape of its answers) are
written once in `operations` and checked against a real gateway's responses by the tests;
`markdown` renders it for people (docs/admin-api.md).
"""
