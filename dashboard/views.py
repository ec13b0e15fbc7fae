"""Dashboard pages (login required)."""
from django.contrib.auth.decorators import login_required
from django.shortcuts import render


@login_required
def index(request):
    from extproxy.engine import get_engine

    return render(request, "dashboard/index.html", {"backends": get_engine().config.backends})
