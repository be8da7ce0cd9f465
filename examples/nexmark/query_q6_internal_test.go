package nexmark

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRecentSalesInAnyOrder adds a seller's sales in shuffled orders (the order in which q6's second
// stage gets sales that close at one watermark depends on the first stage's subtasks) and checks that
// the kept sales are always the last SellerWindow by (expiry, id), oldest first: a sort of all of them.
func TestRecentSalesInAnyOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 500 {
		n := 1 + r.IntN(3*SellerWindow)
		sales := make([]closedSale, n)
		for i := range sales {
			// Few distinct expiries, so that ties on expiry are broken by id.
			sales[i] = closedSale{Seller: 1, Expires: int64(r.IntN(5)), ID: int64(i), Price: int64(r.IntN(1000))}
		}
		r.Shuffle(n, func(i, j int) { sales[i], sales[j] = sales[j], sales[i] })
		var got recentSales
		for _, c := range sales {
			got.add(c)
		}
		want := slices.Clone(sales)
		slices.SortFunc(want, func(a, b closedSale) int {
			if a.before(b) {
				return -1
			}
			return 1
		})
		want = want[max(0, n-SellerWindow):]
		if !slices.Equal(got.Sales[:got.N], want) {
			t.Fatalf("round %d, %d sales in the order %v: kept %v, want %v", round, n, sales, got.Sales[:got.N], want)
		}
	}
}
