"""Models (notebooks 00, 01, 07, 12): the embedded-model registry and cache, loading, memory sizing, and the
catalog of open-weight models to choose from (catalog.py, data in data/models/)."""

from labkit.models.catalog import CatalogModel, Fit, fits_here, load_catalog, what_can_i_run

__all__ = ["CatalogModel", "Fit", "fits_here", "load_catalog", "what_can_i_run"]
