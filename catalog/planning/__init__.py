"""Server-side scan planning: requests, restrictions (grants), the planner, plans kept in the store."""
