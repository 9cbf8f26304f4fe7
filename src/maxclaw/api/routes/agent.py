"""Routes for this capability (filled in by its issue)."""

from fastapi import APIRouter

router = APIRouter()
