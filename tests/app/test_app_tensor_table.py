"""The tensor table on a file of 10,000 tensors: it draws only the rows in view, and its
cursor, sorting (keys and header clicks), filter and choosing a row work on every row."""

from __future__ import annotations

from minigpt_tui.widgets.tensor_table import TensorTable
from tests.app_support import make_app, run_async, settle
from tests.foreign_support import many_tensors_file

COUNT = 10_000


async def open_many(pilot, tmp_path) -> TensorTable:
    """The Checkpoints screen with a new file of COUNT tensors open."""
    path = many_tensors_file(tmp_path / "many.safetensors", COUNT)
    await pilot.press("c")
    await settle(pilot)
    screen = pilot.app.screen
    screen.open_path(path)
    await settle(pilot)
    table = screen.query_one(TensorTable)
    assert table.row_count == len(table.entries) == COUNT
    return table


@run_async
async def test_ten_thousand_tensors_draw_only_the_rows_in_view(tmp_path):
    app = make_app(tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        table = await open_many(pilot, tmp_path)
        drawn: list[int] = []
        row_strip = table._row_strip

        def counting(row, style):
            drawn.append(row)
            return row_strip(row, style)

        table._row_strip = counting
        table.focus()
        table.action_reverse_sort()
        await pilot.pause()
        assert table.shown[0].name == "model.layers.999.block.9.weight"  # offsets, reversed
        assert drawn and max(drawn) < table.size.height  # the rows in view, not 10,000
        drawn.clear()
        await pilot.press("end")
        await pilot.pause()
        assert table.cursor_row == COUNT - 1 and table.highlighted_entry.name == "model.layers.0.block.0.weight"
        assert drawn and min(drawn) > COUNT - table.size.height
        assert len(set(drawn)) < table.size.height


@run_async
async def test_cursor_keys_sort_filter_and_choosing_a_row(tmp_path):
    app = make_app(tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        table = await open_many(pilot, tmp_path)
        table.focus()
        await pilot.press("down", "down", "pagedown")
        assert table.cursor_row == 2 + table.rows_in_view
        top = table.scroll_offset.y
        assert top <= table.cursor_row < top + table.rows_in_view  # the cursor stays in view
        await pilot.press("home")
        assert table.cursor_row == 0 and table.scroll_offset.y == 0
        # A click on the "elements" header sorts by it; a second click reverses.
        x = sum(table.column_width(key) for key in table.column_keys[:table.column_keys.index("elements")])
        await pilot.click(TensorTable, offset=(x + 2, 0))
        assert table.order.column == "elements" and not table.order.reverse
        await pilot.click(TensorTable, offset=(x + 2, 0))
        assert table.order.reverse
        table.sort_by("name")
        assert [e.name for e in table.shown] == sorted(e.name for e in table.entries)
        table.set_filter("layers.42.")
        assert [e.name for e in table.shown] == [f"model.layers.42.block.{i}.weight" for i in range(10)]
        # A click on another row moves the cursor; a click on the highlighted row chooses it.
        await pilot.click(TensorTable, offset=(3, 4))
        assert table.cursor_row == 3
        chosen = []
        app.screen.query_one("#ckpt-main").show_statistics = chosen.append
        await pilot.click(TensorTable, offset=(3, 4))
        await pilot.pause()
        assert [e.name for e in chosen] == ["model.layers.42.block.3.weight"]
