// The example application: a small shop written with the official MongoDB
// Go driver. Its order page has an N+1 in it: it lists a customer's orders,
// then fetches each order's product with a query of its own. Run through
// wirelint, that shows as WL401 n-plus-one on shop.products.
//
// It connects to $MONGODB_URI (in the compose example: wirelint), does its
// work once and exits 0, or exits 1 with the driver's error.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

type Product struct {
	ID    string `bson:"_id"`
	Name  string `bson:"name"`
	Price int    `bson:"price"`
}

type Order struct {
	Customer  int    `bson:"customerId"`
	ProductID string `bson:"productId"`
	Quantity  int    `bson:"qty"`
}

func main() {
	uri := os.Getenv("MONGODB_URI")
	if uri == "" {
		log.Fatal("set MONGODB_URI (e.g. mongodb://127.0.0.1:27018/)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetAppName("shop"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(ctx)
	db := client.Database("shop")
	products, orders := db.Collection("products"), db.Collection("orders")
	for _, c := range []*mongo.Collection{orders, products} {
		if err := c.Drop(ctx); err != nil {
			log.Fatal(err)
		}
	}

	var catalogue []any
	for i := 0; i < 10; i++ {
		catalogue = append(catalogue, Product{ID: fmt.Sprintf("p%d", i), Name: fmt.Sprintf("product %d", i), Price: i})
	}
	if _, err := products.InsertMany(ctx, catalogue); err != nil {
		log.Fatal(err)
	}
	var placed []any
	for c := 0; c < 5; c++ {
		for k := 0; k < 1+c%2; k++ {
			placed = append(placed, Order{Customer: c, ProductID: fmt.Sprintf("p%d", (c*3+k)%10), Quantity: 1})
		}
	}
	if _, err := orders.InsertMany(ctx, placed); err != nil {
		log.Fatal(err)
	}

	// The order page of each customer: the orders, then one query per order.
	lookups := 0
	for c := 0; c < 5; c++ {
		cur, err := orders.Find(ctx, bson.D{{Key: "customerId", Value: c}})
		if err != nil {
			log.Fatal(err)
		}
		var page []Order
		if err := cur.All(ctx, &page); err != nil {
			log.Fatal(err)
		}
		for _, o := range page {
			var p Product
			if err := products.FindOne(ctx, bson.D{{Key: "_id", Value: o.ProductID}}).Decode(&p); err != nil {
				log.Fatal(err)
			}
			lookups++
		}
	}
	fmt.Printf("shop: %d order pages shown, %d product lookups, through %s\n", 5, lookups, uri)
}
